// SPDX-License-Identifier: MIT
// The Producer, which enqueues tasks, with its options (ProducerOptions, EnqueueOptions, TaskSpec).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "streamq/common.hpp"
#include "streamq/errors.hpp"
#include "streamq/export.hpp"
#include "streamq/middleware.hpp"
#include "streamq/record.hpp"

namespace streamq {

class Tracer;  // streamq/tracing.hpp

/// Producer configuration. Validated by the Producer constructor (ConfigError names the field).
struct STREAMQ_EXPORT ProducerOptions {
  ConnectionOptions connection{};
  /// Stream key. Every other key of the queue is derived from it (`<stream>:dlq`, ...), so a
  /// name like `{orders}` keeps the whole queue in one Redis Cluster slot.
  std::string stream = "task_queue";
  /// Backlog bound, and the `MAXLEN ~` argument of every XADD. Must be > 0.
  std::int64_t max_len = 10000;
  Overflow overflow = Overflow::reject;
  /// Payloads larger than this are refused with PayloadError before anything is sent.
  std::size_t max_payload_bytes = 1 << 20;
  /// Payloads nested deeper than this (arrays/objects) are refused with PayloadError: the
  /// Consumer would dead-letter them anyway. Keep equal to ConsumerOptions::max_payload_depth.
  int max_payload_depth = 64;
  /// Retries allowed after the first attempt, unless an enqueue call says otherwise.
  int default_max_retries = 3;
  /// Replicas that must have the tasks of an enqueue before it returns (Redis replicates
  /// asynchronously: a task only the master had is lost when the master fails over). > 0 sends
  /// `WAIT min_replicas_acked replicas_ack_timeout` after the write; fewer acknowledgements
  /// within the timeout throw ReplicationError. 0 (the default): no WAIT.
  int min_replicas_acked = 0;
  /// How long that WAIT may take (> 0); an enqueue can take this long when replicas lag.
  std::chrono::milliseconds replicas_ack_timeout{1000};
  /// The queue's partitions: 1 (default) = one stream, named `stream`. P > 1 = P streams
  /// `{<stream without braces>:0}` ... `{...:P-1}`, each a queue of its own (own dead letters,
  /// delayed set, priority levels, unique locks) in its own Redis Cluster slot, so one queue
  /// spreads over every master. Tasks go to the next partition in turn (each Producer starts at
  /// a random one), or by EnqueueOptions::partition_key. max_len bounds each partition. The queue's
  /// Consumers, StatsReaders and Schedulers must say the same count (see docs/cluster.md,
  /// "Partitioned queues", for changing it). At most 1024.
  int partitions = 1;
  /// Track every task this producer enqueues (see Retention), unless its EnqueueOptions say
  /// otherwise. Unset (the default): only tasks whose EnqueueOptions::retention is set.
  std::optional<Retention> retention{};
  /// Writes the enqueuing span's W3C trace context into each task (fields `traceparent`,
  /// `tracestate`; see streamq/tracing.hpp). Null: none.
  std::shared_ptr<Tracer> tracer{};
};

/// Options of Producer::wait and wait_async.
struct STREAMQ_EXPORT WaitOptions {
  /// A task without a record yet may be enqueued later (by another producer): wait for it until
  /// the timeout, instead of failing within about a second with "no record".
  bool wait_for_enqueue = false;
};

/// What a debounced enqueue does when its key's task is still waiting (see Debounce).
enum class DebounceMode {
  /// The call is dropped: the waiting task runs as the first call of the burst wrote it.
  keep_first,
  /// The call's payload replaces the waiting task's, and the task's start moves to `window`
  /// (plus the call's delay) from this call.
  replace_latest,
};

/// EnqueueOptions::debounce: collapse a burst of enqueues under one key into one run. The first
/// call under `key` starts a cycle: its task waits in `<stream>:delayed` until `window` (plus
/// the call's EnqueueOptions::delay) from that call, and `<stream>:debounce:<key>` (a hash with
/// the task's id and its delayed member, PEXPIRE'd to its due time) says it waits. A later call
/// under the key while the task still waits there is dropped (DebounceMode::keep_first) or
/// replaces the task's payload and moves its start back (DebounceMode::replace_latest); either
/// way it returns the waiting task's id, writes no task of its own, and is not refused by a full
/// queue. Once the task left the delayed set (due and moved to its stream, run now, cancelled) or
/// the key expired, the next call starts a new cycle. Checked and written in the enqueue's own
/// script. See docs/producer.md, "Debounced tasks".
struct STREAMQ_EXPORT Debounce {
  /// The burst's key (not empty). In a partitioned queue it picks the task's partition.
  std::string key{};
  /// How long a cycle waits for more calls (> 0).
  std::chrono::milliseconds window{0};
  DebounceMode mode = DebounceMode::keep_first;
};

/// Per-task options for Producer::enqueue and enqueue_batch.
struct STREAMQ_EXPORT EnqueueOptions {
  /// Caller-given task id; empty = a new UUID v4. An id is not checked for uniqueness: a
  /// retried enqueue with the same id adds a second task unless unique_for is set (the task id
  /// is then the default unique key).
  std::string task_id{};
  /// Retries allowed after the first attempt; unset = ProducerOptions::default_max_retries.
  std::optional<int> max_retries{};
  /// Extra fields written after the standard ones and carried through retries and the
  /// dead-letter stream. Names must not collide with wire fields.
  std::vector<std::pair<std::string, std::string>> extra_fields{};
  /// Run no earlier than this long from now, by the Redis server's clock (so producers and
  /// workers with skewed clocks agree). The task waits in `<stream>:delayed` (a sorted set
  /// by due time that keeps the whole task) until a consumer's forwarder moves it to its
  /// stream. Must be >= 0; 0 = now. Not together with run_at.
  std::chrono::milliseconds delay{0};
  /// Run no earlier than this time (as the delayed set stores it: ms since the Unix epoch,
  /// compared with the Redis server's clock). A time already past runs now.
  std::optional<std::chrono::system_clock::time_point> run_at{};
  /// Which stream the task goes to (see Priority). A retry keeps it.
  Priority priority = Priority::normal;
  /// > 0: refuse the task with DuplicateTaskError while another task with the same unique
  /// key was enqueued within this window and has not finished. The lock,
  /// `<stream>:unique:<key>` holding the task id, is checked and written in the enqueue's own
  /// script, kept through retries, released when the task succeeds (in the MULTI of its ack)
  /// or is dead-lettered (in the dead-letter script), in both cases only while it still holds
  /// this task's id, and expires on its own after unique_for. One dead letter does not release
  /// it and leaves it to expire: an entry whose body was deleted before any live consumer read
  /// it again (body_lost: its fields, unique_key among them, are gone). (The provisional record
  /// of an entry whose body was deleted while it ran releases it once its worker is gone and the
  /// record is the task's fate, see docs/delivery.md.) 0 = no uniqueness; < 0 is a
  /// ConfigError.
  std::chrono::milliseconds unique_for{0};
  /// The unique key; empty = the task id. Only with unique_for (else ConfigError). Written
  /// as the task's `unique_key` field, which the consumer reads to release the lock.
  std::string unique_key{};
  /// With ProducerOptions::partitions > 1: tasks with the same partition key go to the same
  /// partition (CRC16-XMODEM of the key, mod partitions), so a consumer sees them in the order
  /// they were enqueued. Empty = the unique key when unique_for is set (so uniqueness holds
  /// across partitions), else the next partition in turn. Ignored with one partition. (A unique
  /// key's lock lives in its task's partition: two tasks with one unique key but different
  /// partition keys can both be enqueued.)
  std::string partition_key{};
  /// Track this task (see Retention, TaskRecord): its record `<stream>:task:<task_id>` (written
  /// by the enqueue script) says where it is, what became of it and what it returned, for this
  /// long once it finished; every change is an event of `<stream>:events`; Producer::wait
  /// returns its result. Unset = ProducerOptions::retention. @throws ConfigError (enqueue) for a
  /// negative duration or one over ten years.
  std::optional<Retention> retention{};
  /// A time by which the task must have finished (written as its `deadline` field, ms since the
  /// Unix epoch; kept by its retries). A consumer that takes it later dead-letters it without
  /// running it (reason `deadline`); one whose handler still runs at the deadline signals the
  /// task's stop_token, and the attempt then ends as a failure that is dead-lettered with reason
  /// `deadline` (a retry could only be later still). A handler that ignores the token is given
  /// ConsumerOptions::timeout_grace more, then its task is dead-lettered all the same and what
  /// its thread does afterwards is dropped (see HandlerOptions::timeout). Unset = none.
  std::optional<std::chrono::system_clock::time_point> deadline{};
  /// The batch (Producer::open_batch, by any producer of the queue) this task joins: it must be
  /// open, else the enqueue is refused with BatchClosedError, nothing written. The task is
  /// tracked (an hour once done when no retention is set) and goes to the batch's partition.
  /// Its end (done, dead, cancelled) is counted in the batch. Empty: none.
  std::string batch{};
  /// The tenant this task belongs to: a customer, an account, a webhook destination (1 to 256
  /// bytes, no NUL). The task waits in its tenant's backlog, and workers take the tenants that
  /// have work in turn (by weight), so one tenant's backlog does not hold the others back; its
  /// tenant's limits apply: concurrency, rate, pause, and its max_len (a full tenant refuses
  /// with QueueFullError, the others go on). See docs/tenants.md. In a partitioned queue the task
  /// goes to its tenant's partition (then it may not also be unique, debounced or join a batch).
  /// Empty: none.
  std::string tenant{};
  /// Collapse a burst of enqueues under one key into one run (see Debounce): enqueue returns the
  /// id of the task that will run, which is this call's (task_id, or a new UUID) only when the
  /// call starts a cycle (enqueue_async's completion gets it too; its middleware, which runs
  /// before the write, sees this call's own id). The task's start is `window` plus `delay` from
  /// the call that started the cycle (keep_first) or from the last call (replace_latest). A
  /// replacement takes only the call's payload (the task type must be the waiting task's, else
  /// ConfigError); the task keeps its id and every other option of the call that started the
  /// cycle. @throws ConfigError
  /// (enqueue) for an empty key, a window <= 0, or together with run_at, unique_for,
  /// partition_key, batch, or a tenant in a partitioned queue; and from enqueue_batch,
  /// enqueue_flow and open_batch's callbacks, which cannot say which task a dropped call became.
  /// Unset: none.
  std::optional<Debounce> debounce{};
};

/// One enqueue as a producer middleware sees it: what is about to be written, changeable before
/// next() (e.g. an extra field carrying an auth context or a trace context), and the task's id
/// once next() returned.
struct STREAMQ_EXPORT EnqueueCall {
  std::string task_type;
  std::string payload;  ///< JSON text
  EnqueueOptions options;
  std::string task_id;  ///< set by next() (the write); for enqueue_batch see Producer::use
};

/// Runs around each Producer::enqueue (and for each task of enqueue_batch, see Producer::use),
/// in the order added: the first added is the outermost. What it throws is what enqueue throws.
using ProducerMiddleware = std::function<void(EnqueueCall& call, const Next& next)>;

namespace detail {
/// True for the types enqueue and Payload take as JSON text: std::string, std::string_view,
/// const char*, char arrays (string literals). nlohmann::json is never JSON text.
template <class T>
inline constexpr bool is_json_text_v =
    std::is_convertible_v<const T&, std::string_view> && !nlohmann::detail::is_basic_json<T>::value;
}  // namespace detail

/// The payload of one task, held as JSON text. Built implicitly from
/// - JSON text (`std::string`, `std::string_view`, `const char*`, a string literal): kept as
///   given, checked by enqueue/enqueue_batch (PayloadError if it is not JSON);
/// - a JSON value (`nlohmann::json`, `nlohmann::ordered_json`): serialised with dump();
/// - a braced list, read as nlohmann::json reads it: `{{"to", "a@b.c"}}` is the object
///   {"to":"a@b.c"} (so `Payload{"x"}` is the array ["x"]; write `Payload("x")` for text);
/// - any other type with an nlohmann `to_json` (a struct with NLOHMANN_DEFINE_TYPE_*, a map,
///   a vector, ...): converted with to_json, then serialised.
/// @throws PayloadError when to_json throws or the value cannot be serialised (for example a
///   string that is not UTF-8), never a raw nlohmann exception.
///
/// @code
///   streamq::TaskSpec a{.task_type = "t", .payload = R"({"n":1})"};               // JSON text
///   streamq::TaskSpec b{.task_type = "t", .payload = nlohmann::json{{"n", 1}}};   // a JSON value
///   streamq::TaskSpec c{.task_type = "t", .payload = {{"n", 1}}};                 // a braced list
///   streamq::TaskSpec d{.task_type = "t", .payload = std::vector<int>{1, 2, 3}};  // to_json
/// @endcode
///
/// Thread safety: a value type; const access from any thread.
class STREAMQ_EXPORT Payload {
 public:
  /// Empty text: not JSON, so enqueue refuses it with PayloadError.
  Payload() = default;
  /// JSON text, as given.
  Payload(std::string json_text) : text_(std::move(json_text)) {}
  Payload(std::string_view json_text) : text_(json_text) {}
  Payload(const char* json_text) : text_(json_text ? json_text : "") {}
  /// A braced list, read as nlohmann::json reads it.
  Payload(nlohmann::json::initializer_list_t init) : text_(serialise(nlohmann::json(init))) {}
  /// A JSON value, or any type nlohmann::json can be built from (its to_json).
  template <class T>
  requires(!detail::is_json_text_v<T> && !std::is_same_v<std::remove_cvref_t<T>, Payload> &&
           (nlohmann::detail::is_basic_json<T>::value || std::is_constructible_v<nlohmann::json, const T&>))
      Payload(const T& value)
      : text_(convert(value)) {}

  /// The JSON text that will be stored in the task's `payload` field.
  const std::string& text() const noexcept { return text_; }

 private:
  template <class Json>
  static std::string serialise(const Json& j) {
    try {
      return j.dump();
    } catch (const std::exception& e) {
      throw PayloadError(std::string("payload cannot be serialised as JSON: ") + e.what());
    }
  }
  template <class T>
  static std::string convert(const T& value) {
    if constexpr (nlohmann::detail::is_basic_json<T>::value) {
      return serialise(value);
    } else {
      nlohmann::json j;
      try {
        j = nlohmann::json(value);
      } catch (const std::exception& e) {
        throw PayloadError(std::string("payload conversion to JSON (to_json) failed: ") + e.what());
      } catch (...) {
        throw PayloadError("payload conversion to JSON (to_json) failed: unknown exception");
      }
      return serialise(j);
    }
  }

  std::string text_;
};

/// The payload of the asio forms of enqueue (Producer::async_enqueue): what a Payload is built
/// from (JSON text, a JSON value, a typed value), or a braced list of key/value pairs read as a
/// JSON object, `{{"photo", 1}, {"size", "large"}}` (up to 16 members). The braced list is read
/// member by member, without a std::initializer_list: GCC 12 cannot compile one among the
/// arguments of a co_await'ed call ("array used as initializer"), so
/// `co_await producer.async_enqueue("thumbnail", {{"photo", 1}}, asio::use_awaitable)` compiles
/// there too. (A member whose value is a braced list itself, `{"sizes", {1, 2}}`, brings one
/// back: with GCC 12 give such a payload as a named Payload. A braced JSON array is not taken
/// here: give it as nlohmann::json::array({...}).)
///
/// Thread safety: a value type.
class STREAMQ_EXPORT AsyncPayload {
 public:
  /// One member of a braced object: its key, and its value as nlohmann::json builds it.
  class Member {
   public:
    Member() noexcept : set_(false) {}  // (none: a default argument)
    Member(std::string_view key, nlohmann::json value) : key_(key), value_(std::move(value)), set_(true) {}

   private:
    friend class AsyncPayload;
    std::string key_;
    nlohmann::json value_;
    bool set_;
  };

  /// What a Payload is built from. (A template: a braced list never lands here.)
  template <class T>
  requires(!std::is_same_v<std::remove_cvref_t<T>, AsyncPayload> &&
           std::is_constructible_v<Payload, const T&>) AsyncPayload(const T& payload)
      : payload_(payload) {}
  /// A braced object: `{{"photo", 1}}`, `{{"to", "a@b.c"}, {"template", "welcome"}}`. A key
  /// given twice keeps its first value (as nlohmann::json does). @throws PayloadError when the
  /// object cannot be serialised.
  AsyncPayload(Member m1, Member m2 = Member(), Member m3 = Member(), Member m4 = Member(),
               Member m5 = Member(), Member m6 = Member(), Member m7 = Member(), Member m8 = Member(),
               Member m9 = Member(), Member m10 = Member(), Member m11 = Member(), Member m12 = Member(),
               Member m13 = Member(), Member m14 = Member(), Member m15 = Member(), Member m16 = Member())
      : payload_(object_of(
            {&m1, &m2, &m3, &m4, &m5, &m6, &m7, &m8, &m9, &m10, &m11, &m12, &m13, &m14, &m15, &m16})) {}

  const Payload& payload() const noexcept { return payload_; }

 private:
  static Payload object_of(std::initializer_list<Member*> members) {
    nlohmann::json object = nlohmann::json::object();
    for (Member* m : members) {
      if (m->set_) object.emplace(std::move(m->key_), std::move(m->value_));
    }
    return Payload(object);
  }

  Payload payload_;
};

/// One task of a batch for Producer::enqueue_batch.
struct STREAMQ_EXPORT TaskSpec {
  std::string task_type{};
  /// JSON text, a JSON value, a braced list or a typed value (see Payload).
  Payload payload{};
  EnqueueOptions options{};
};

/// What a child's failure (it was dead-lettered, or cancelled) does to the parent that waits for
/// it (FlowNode::on_failure). See docs/workflows.md.
enum class ChildFailure {
  /// The parent ends dead, unrun, with reason `child_failed` (its own parent learns that in
  /// turn). The child stays among its parent's pending children: replaying its dead letter,
  /// once it succeeds, resumes the flow.
  fail_parent,
  /// The parent runs once its other children finished, and reads this failure among its
  /// children's results (ChildResult::state "dead" or "cancelled", with the error).
  ignore,
  /// The parent runs without it: the child is no longer among its dependencies, nor among the
  /// results it reads.
  remove,
};

/// Another queue a flow's task goes to (FlowNode::queue): its stream, as its own producers and
/// consumers name it (ProducerOptions::stream), and its partitions (ProducerOptions::partitions).
struct STREAMQ_EXPORT FlowQueue {
  std::string stream{};
  int partitions = 1;
};

/// One task of a flow (Producer::enqueue_flow), with the children it waits for. A node with
/// children is a parent: it runs once every child finished (each of those once all of its own
/// did), and reads their results (Task::children_results).
struct STREAMQ_EXPORT FlowNode {
  std::string task_type{};
  /// JSON text, a JSON value, a braced list or a typed value (see Payload).
  Payload payload{};
  /// As for enqueue. A parent may not have a delay or run_at (it runs when its children
  /// finished). Unset retention (here and in ProducerOptions) = a flow's tasks are tracked all
  /// the same, kept an hour once done and as long as their dead letter once dead.
  EnqueueOptions options{};
  /// What this node's failure does to its parent; ignored on the flow's root.
  ChildFailure on_failure = ChildFailure::fail_parent;
  std::vector<FlowNode> children{};
  /// Unset: the task goes to the producer's queue. Set: to that queue instead, run by its
  /// consumers (in the partition of its partition_key, else of its task id), its end carried to
  /// its parent by their courier (docs/workflows.md, "Flows across queues"). Only a task without
  /// children may go to another queue; it may not join a batch or be unique.
  std::optional<FlowQueue> queue{};
};

/// The task ids of a flow, in the shape of its FlowNode tree (Producer::enqueue_flow).
struct STREAMQ_EXPORT FlowIds {
  std::string task_id{};
  std::vector<FlowIds> children{};
};

/// A chain: each task of `tasks` runs after the one before it finished, and reads its result
/// (`task.children_results()[0]`). The flow's root is the last task. A failure fails the tasks
/// after it (ChildFailure::fail_parent). @throws ConfigError for an empty list.
STREAMQ_EXPORT FlowNode chain(std::vector<TaskSpec> tasks);
/// A chord: the `header` tasks run (in parallel), then `callback` runs with their results, in
/// the header's order. `on_failure` applies to every header task. @throws ConfigError for an
/// empty header.
STREAMQ_EXPORT FlowNode chord(std::vector<TaskSpec> header, TaskSpec callback,
                              ChildFailure on_failure = ChildFailure::fail_parent);
/// The task type of a group's root (group()).
inline constexpr std::string_view group_task_type = "streamq:group";
/// A group: `tasks` run (in parallel) and are awaited together by the root's id, with no task
/// run after them. The root is not a task that runs: its record (type "streamq:group") says
/// waiting until every task finished, then done, set by the script that wrote the last end,
/// with their outcomes as its result (group_results), or dead (reason child_failed) under
/// ChildFailure::fail_parent. Producer::wait on the root's id waits for the group. Its id is
/// the root's `options.task_id` (set it on the returned node), else a new one. A group may be a
/// child in a flow. @throws ConfigError for an empty list.
STREAMQ_EXPORT FlowNode group(std::vector<TaskSpec> tasks,
                              ChildFailure on_failure = ChildFailure::fail_parent);
/// What a finished group's tasks ended with, in the order given (a group's record: its type
/// "streamq:group"; empty while it waits, or when it ended dead). @throws ConfigError for a
/// record of another type; std::runtime_error for a result not written by streamq.
STREAMQ_EXPORT std::vector<ChildResult> group_results(const TaskRecord& group);

/// A batch of tasks (Producer::open_batch): a set that grows while it is open, from any
/// producer (EnqueueOptions::batch), whose callbacks are enqueued as tasks once it is closed and
/// every member finished. See docs/workflows.md.
struct STREAMQ_EXPORT BatchOptions {
  /// The batch's id; empty = a new UUID v4. An id in use (open, or fired within a day) is
  /// refused with ConfigError.
  std::string batch_id{};
  /// Enqueued once the batch is closed and every member finished (done, dead or cancelled).
  std::optional<TaskSpec> on_complete{};
  /// Enqueued then too, when every member succeeded (none dead or cancelled).
  std::optional<TaskSpec> on_success{};
  /// The open batch this one is nested in: it counts there as one member, which ends when this
  /// one fires (succeeded when none of its members failed). Empty: none.
  std::string parent_batch{};
};

/// The completion of Producer::enqueue_async: `error` null and the task's id, or `error` holding
/// what enqueue would have thrown (and an empty id). See Producer for the thread it runs on.
using EnqueueHandler = std::function<void(std::exception_ptr error, std::string task_id)>;
/// The completion of Producer::enqueue_batch_async: the ids, or what enqueue_batch would have
/// thrown (QueueFullError and DuplicateTaskError carry the ids of the tasks written).
using BatchHandler = std::function<void(std::exception_ptr error, std::vector<std::string> task_ids)>;
/// The completion of Producer::wait_async: the record, or TaskFailedError / WaitTimeoutError.
using WaitHandler = std::function<void(std::exception_ptr error, TaskRecord record)>;
/// The completion of Producer::enqueue_flow_async: the flow's ids, or what enqueue_flow would
/// have thrown.
using FlowHandler = std::function<void(std::exception_ptr error, FlowIds ids)>;
/// The completion of Producer::close_batch_async: whether this call closed the batch, or what
/// close_batch would have thrown.
using CloseBatchHandler = std::function<void(std::exception_ptr error, bool closed_now)>;

/// Enqueues tasks on one Redis stream.
///
/// @code
///   streamq::Producer producer({.connection = {.url = "redis://127.0.0.1:6379"},
///                               .stream = "task_queue"});
///   std::string id = producer.enqueue("send_email", {{"to", "user@example.com"}});
///   producer.enqueue("send_email", R"({"to":"user@example.com"})");  // JSON text
/// @endcode
///
/// Thread safety: every call may overlap with any other, from any number of threads; one
/// Producer is meant to be shared by the whole service. It writes on one connection: the calls
/// that arrive while a round trip is in flight go out together in the next write (automatic
/// pipelining), and each caller gets its own answer, in order; a thread's own calls are written
/// in the order it made them. Under Overflow::reject the calls of plain tasks (immediate, normal
/// priority, not unique, not tracked), blocking or not, that wait together merge into one enqueue
/// script call of up to 64 tasks, which admits or refuses each on its own. A refusal (QueueFullError,
/// DuplicateTaskError, a ReplyError) fails only its own call; a connection lost fails the calls
/// whose replies were not read (their outcome is unknown, as for one caller), and the next write
/// connects again. A second connection is made for waits, at the first wait. Movable, not
/// copyable; moving it or destroying it must not overlap a call.
///
/// The `_async` calls return at once. Their completion runs on the Producer's completion thread
/// (one per Producer, started at the first such call), never inside another call; it must not
/// block for long, since the completions of every asynchronous call wait behind it (a batch
/// whose chunks must be sent again, or that waits for replicas, is finished on that thread and
/// holds it for that long). wait_async's completion runs on the waits' thread instead. Every
/// outcome, a bad argument's too, reaches the completion (or the future), never the caller. The
/// Producer's destructor answers the asynchronous calls still queued (their completions run)
/// before it returns; a completion must not destroy its own Producer (std::terminate, with a
/// message).
class STREAMQ_EXPORT Producer {
 public:
  /// Validates the options (ConfigError names the bad field). Connects lazily, on the first
  /// enqueue, so a Producer can be built while Redis is still starting.
  explicit Producer(ProducerOptions options = {});
  ~Producer();
  Producer(Producer&&) noexcept;
  Producer& operator=(Producer&&) noexcept;
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  /// Enqueues one task and returns its task id (with EnqueueOptions::debounce: the id of the
  /// task that will run, which may be an earlier call's). `payload_json` is JSON text, stored as
  /// given (a string literal, std::string or std::string_view always lands here, never in the
  /// overloads below). One round trip: EVALSHA of the enqueue script (Overflow::reject, or
  /// a task with a delay, a priority, a unique key or a debounce key), else the seed's
  /// `XADD <stream> MAXLEN ~ <max_len> * ...` (Overflow::trim_oldest). With
  /// ProducerOptions::min_replicas_acked, a second one: `WAIT`.
  /// @throws PayloadError (too large, not JSON, too deep; nothing sent), QueueFullError,
  ///   DuplicateTaskError (unique_for), ConfigError (bad task type, id, extra field, delay,
  ///   unique key or debounce; a debounce key whose waiting task has another type), ReplyError (e.g.
  ///   WRONGTYPE, OOM, NOPERM), ConnectionError / TimeoutError (the outcome is unknown: retry with the same
  ///   task id, and unique_for if a second copy must not be added), ReplicationError (written, but fewer
  ///   replicas than min_replicas_acked have it).
  std::string enqueue(std::string_view task_type, std::string_view payload_json,
                      const EnqueueOptions& options = {});

  /// Same, with a braced list read as nlohmann::json reads it:
  /// `producer.enqueue("send_email", {{"to", "a@b.c"}})` stores {"to":"a@b.c"}.
  /// @throws as above.
  std::string enqueue(std::string_view task_type, nlohmann::json::initializer_list_t payload,
                      const EnqueueOptions& options = {}) {
    const Payload p(payload);
    return enqueue(task_type, std::string_view(p.text()), options);
  }

  /// Same, with a JSON value (`nlohmann::json{{"to", "a@b.c"}}`, any JSON value, as the seed's
  /// json.dumps allows), a Payload, or a typed value converted with its nlohmann `to_json`:
  /// `producer.enqueue("resize", Resize{.width = 640})`. Pair it with Consumer::on<T>.
  /// @throws PayloadError when to_json throws or the value cannot be serialised (nothing
  ///   sent), and as above.
  template <class T>
  requires(!detail::is_json_text_v<T> && std::is_constructible_v<Payload, const T&>) std::string
      enqueue(std::string_view task_type, const T& payload, const EnqueueOptions& options = {}) {
    const Payload p(payload);
    return enqueue(task_type, std::string_view(p.text()), options);
  }

  /// Enqueues many tasks in one pipeline and returns their ids in the order given. Every
  /// payload is validated before anything is sent. With Overflow::reject the tasks are
  /// written in chunks of up to 64 per script call, each chunk all-or-nothing (it fits in
  /// the remaining capacity or none of it is written). Once a chunk is refused, no later
  /// chunk of the batch is written, even one that would fit (a smaller last chunk, or room a
  /// consumer freed meanwhile): what was written is always a prefix of `tasks`. The call then
  /// throws QueueFullError; its batch_ids() holds the ids of the first accepted() tasks
  /// (the ones written) and "" for the rest, and its message says how many of how many were
  /// written and which indices were refused, e.g. "queue full: wrote 64 of 150 tasks
  /// (indices 0-63); refused 86 (indices 64-149) and wrote nothing after the first refused
  /// one: QUEUEFULL ...". Re-send `tasks` from index accepted() on once there is room.
  /// A chunk holding a task whose unique key is taken (DuplicateTaskError, with index() the
  /// first such task) is refused the same way, and so is every chunk after it.
  /// A batch of more than 64 tasks keeps a short-lived refusal mark,
  /// `<stream>:batch:<uuid>:refused` (SET/EXISTS/PEXPIRE, expires after a minute), so the
  /// pipelined chunks behind a refused one know to write nothing.
  /// With ProducerOptions::partitions > 1, the chunks hold tasks of one partition each, every
  /// partition has its own refusal mark, and what was written of each partition's tasks is a
  /// prefix of them. A chunk sent where its slot no longer is (MOVED, ASK, TRYAGAIN) is sent
  /// again on its own. When Redis refuses a chunk for another reason (OOM, WRONGTYPE, ...), the
  /// call throws that ReplyError, whose message also says which tasks were written, if any.
  /// @throws as enqueue.
  std::vector<std::string> enqueue_batch(const std::vector<TaskSpec>& tasks);

  /// enqueue without blocking: the task is written with the next write, and `done` gets its id
  /// or the error enqueue would have thrown. The middleware run in this call (next() adds the task
  /// to the queue and sets its task_id); what the write then meets reaches only `done`.
  void enqueue_async(std::string_view task_type, const Payload& payload, const EnqueueOptions& options,
                     EnqueueHandler done);
  /// The same, with a std::future of the id (get() throws what enqueue would have thrown).
  std::future<std::string> enqueue_async(std::string_view task_type, const Payload& payload,
                                         const EnqueueOptions& options = {});
  /// Enqueues a flow (see FlowNode, chain, chord, docs/workflows.md) in one script call: all of
  /// it, or nothing. The tasks without children go to their streams; each parent waits, unrun
  /// (its record says `waiting`), until its last child finished, and is then enqueued by the
  /// script that wrote that child's end, exactly once. Every task of a flow is tracked, so
  /// wait() on the root's id waits for the whole flow. In a partitioned queue every parent goes
  /// to the root's partition (its partition_key, else its task id, picks it), and each task
  /// without children to its own (docs/workflows.md, "Flows across partitions"). Returns the
  /// ids in the flow's shape.
  /// @throws ConfigError (an empty task type, a parent with a delay or run_at, a task id given
  ///   twice, more than 10,000 tasks, deeper than 64 levels, a task with a batch in a queue of
  ///   more than one partition, and as enqueue), PayloadError, BatchClosedError,
  ///   QueueFullError (the flow does not fit in max_len: nothing written), DuplicateTaskError,
  ///   ReplyError, ConnectionError / TimeoutError (the outcome is unknown: enqueue it again with
  ///   the same task ids and unique_for on its root if a second copy must not be added),
  ///   ReplicationError.
  FlowIds enqueue_flow(const FlowNode& root);

  /// Opens a batch and returns its id. Tasks join it with EnqueueOptions::batch while it is
  /// open; close_batch() closes it. Once it is closed and every member finished, the script
  /// that saw the last end (or the close) enqueues its callbacks, exactly once, in the batch's
  /// queue: on_complete, and on_success when no member failed. Each callback carries the
  /// `batch_id` field. The batch's counts (Inspector::batch) stay a day after it fired.
  /// @throws ConfigError (an id in use; a callback with a delay, run_at or unique_for; as
  ///   enqueue), PayloadError, BatchClosedError (parent_batch is not open), ReplyError,
  ///   ConnectionError / TimeoutError (unknown: open it again with the same batch_id, and a
  ///   ConfigError then says it was).
  std::string open_batch(const BatchOptions& options = {});
  /// Closes batch `batch_id`: no task joins it any more. Returns true when this call closed it,
  /// false when it was closed already. @throws BatchClosedError when there is no such batch.
  bool close_batch(const std::string& batch_id);

  /// enqueue_batch without blocking (see enqueue_async).
  void enqueue_batch_async(std::vector<TaskSpec> tasks, BatchHandler done);
  std::future<std::vector<std::string>> enqueue_batch_async(std::vector<TaskSpec> tasks);
  /// enqueue_flow without blocking: the flow is checked and its call built in this call (a bad
  /// flow's ConfigError reaches `done`), written with the next write, and answered on the
  /// completion thread, which also places its tasks in other partitions or queues (a blocking
  /// call there, see the class comment) before `done` runs. The future form's get() throws what
  /// enqueue_flow would have thrown.
  void enqueue_flow_async(const FlowNode& root, FlowHandler done);
  std::future<FlowIds> enqueue_flow_async(const FlowNode& root);
  /// open_batch without blocking (see enqueue_async): `done` gets the batch's id.
  void open_batch_async(const BatchOptions& options, EnqueueHandler done);
  std::future<std::string> open_batch_async(const BatchOptions& options = {});
  /// close_batch without blocking: `done` gets whether this call closed it.
  void close_batch_async(const std::string& batch_id, CloseBatchHandler done);
  std::future<bool> close_batch_async(const std::string& batch_id);

  /// The asio component's forms of the calls above (defined in <streamq/asio.hpp>, which must be
  /// included to use them; target streamq::asio): `token` is any asio completion token, e.g.
  /// `co_await producer.async_enqueue("t", payload, asio::use_awaitable)` suspends the coroutine
  /// instead of its thread. Signatures `void(std::exception_ptr, std::string)`,
  /// `void(std::exception_ptr, std::vector<std::string>)` and `void(std::exception_ptr,
  /// TaskRecord)`. async_wait supports asio's per-operation cancellation: a cancelled wait ends
  /// at once with asio::error::operation_aborted (the task itself is not touched); an enqueue
  /// cannot be taken back once queued, so async_enqueue ignores cancellation.
  /// The payload: anything a Payload is built from, or a braced object (see AsyncPayload).
  template <class CompletionToken>
  auto async_enqueue(std::string_view task_type, AsyncPayload payload, const EnqueueOptions& options,
                     CompletionToken&& token);
  template <class CompletionToken>
  auto async_enqueue(std::string_view task_type, AsyncPayload payload, CompletionToken&& token);
  template <class CompletionToken>
  auto async_enqueue_batch(std::vector<TaskSpec> tasks, CompletionToken&& token);
  /// Signature `void(std::exception_ptr, FlowIds)`.
  template <class CompletionToken>
  auto async_enqueue_flow(FlowNode root, CompletionToken&& token);
  /// Signature `void(std::exception_ptr, std::string)`: the batch's id.
  template <class CompletionToken>
  auto async_open_batch(BatchOptions options, CompletionToken&& token);
  /// Signature `void(std::exception_ptr, bool)`: whether this call closed it.
  template <class CompletionToken>
  auto async_close_batch(std::string batch_id, CompletionToken&& token);
  template <class CompletionToken>
  auto async_wait(const std::string& task_id, std::chrono::milliseconds timeout, WaitOptions options,
                  CompletionToken&& token);
  template <class CompletionToken>
  auto async_wait(const std::string& task_id, std::chrono::milliseconds timeout, CompletionToken&& token);

  /// Adds a middleware around each enqueue (see ProducerMiddleware): the first added is the
  /// outermost; ProducerOptions::tracer's context is written innermost, after every middleware.
  /// For enqueue, next() writes the task (one round trip) and sets EnqueueCall::task_id. For
  /// enqueue_batch, each task's chain runs in turn before anything is sent, and next() adds the
  /// task to the batch: its task_id is set then, and the batch is written once every chain
  /// returned. A middleware that returns without calling next() makes enqueue throw
  /// MiddlewareError (nothing written), and enqueue_batch throw it before anything is sent.
  /// @throws ConfigError for an empty middleware.
  void use(ProducerMiddleware middleware);

  /// Waits until tracked task `task_id` (enqueued with a Retention, by any producer of this
  /// queue) has finished, and returns its record: TaskRecord::result is what its handler
  /// returned. A thread of this Producer reads the task's record (a task that finished before
  /// the call is answered from it) and follows the queue's events stream (`XREAD BLOCK`, one
  /// connection for every wait), so a thousand waits cost one read loop. A record that a wait
  /// read before its task ended is kept for a minute after the end even with Retention::done = 0;
  /// a task whose record went with its end while the thread was reading events is answered from
  /// its final event. Every wait ends within `timeout` (give or take a few milliseconds),
  /// whatever Redis does: a server out of reach makes it a WaitTimeoutError saying so.
  /// Any number of threads may wait at once.
  /// @throws TaskFailedError (it ended dead or cancelled: what() says why, record() is its
  ///   record), WaitTimeoutError (not finished within `timeout`; or no record of it was found
  ///   within about a second: not tracked, expired, another queue's, or not enqueued yet, see
  ///   WaitOptions), ConfigError (a negative timeout, or one over ten years).
  TaskRecord wait(const std::string& task_id, std::chrono::milliseconds timeout);
  /// wait() with options (WaitOptions::wait_for_enqueue: a task that has no record yet).
  TaskRecord wait(const std::string& task_id, std::chrono::milliseconds timeout, WaitOptions options);
  /// wait() without blocking: the future holds the record, TaskFailedError or WaitTimeoutError;
  /// a ConfigError for the timeout is thrown by the call.
  std::future<TaskRecord> wait_async(const std::string& task_id, std::chrono::milliseconds timeout);
  std::future<TaskRecord> wait_async(const std::string& task_id, std::chrono::milliseconds timeout,
                                     WaitOptions options);
  /// wait() with a completion, called once on the waits' thread (a ConfigError for the timeout
  /// reaches it too).
  void wait_async(const std::string& task_id, std::chrono::milliseconds timeout, WaitOptions options,
                  WaitHandler done);
  /// Enqueues a task (as enqueue) and waits for it (as wait). It is tracked whatever the options
  /// say: with their retention, else ProducerOptions::retention, else one that keeps the record
  /// for max(timeout, 1 min) once done; a retention of 0 becomes a minute (the task could end
  /// before the wait reads its record, which would then be gone with its result).
  /// @throws as enqueue and wait.
  TaskRecord enqueue_and_wait(std::string_view task_type, const Payload& payload, EnqueueOptions options,
                              std::chrono::milliseconds timeout);

  /// The options this producer runs with.
  const ProducerOptions& options() const noexcept;

 private:
  struct STREAMQ_NO_EXPORT Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamq
