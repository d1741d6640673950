// SPDX-License-Identifier: MIT
// Producer's state, and its member functions' places: producer.cpp (the facade and the waits),
// prepare.cpp, batch.cpp and replication.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "merged_enqueue.hpp"
#include "prepare.hpp"
#include "redis/argv.hpp"
#include "redis/scripts.hpp"
#include "redis/shared_connection.hpp"
#include "streamq/producer.hpp"
#include "waiter.hpp"
#include "wire/keys.hpp"

namespace streamq {

namespace detail {

/// A completion that settles `promise`.
template <class T>
std::function<void(std::exception_ptr, T)> settling(std::shared_ptr<std::promise<T>> promise) {
  return [promise = std::move(promise)](std::exception_ptr error, T value) {
    if (error) {
      promise->set_exception(error);
    } else {
      promise->set_value(std::move(value));
    }
  };
}

}  // namespace detail

struct Producer::Impl {
  /// One task's write: what its command views (its type, payload, options, id) and the command.
  /// Built by build_one(), answered by finish_one(); it must not move in between.
  struct OneWrite {
    std::string type;
    std::string payload;
    EnqueueOptions options;
    std::string id{};
    std::string created_at{};
    std::vector<detail::Prepared> one{};
    detail::Argv argv{};
    detail::ScriptId script = detail::not_a_script;
    /// Written merged with other calls' (MergedEnqueue), not by `argv`: a plain task (immediate,
    /// normal priority, not unique, not tracked) under Overflow::reject.
    bool merged = false;
  };
  /// A batch's write (see enqueue_batch): its tasks prepared, their chunks' commands, and which
  /// task each chunk holds. Built by build_batch(), answered by finish_batch().
  struct BatchWrite {
    std::vector<TaskSpec> owned;  // the tasks, for an asynchronous batch (they are viewed)
    std::string created_at;       // viewed by every task
    std::vector<std::string> ids;
    std::vector<detail::Prepared> prepared;
    std::vector<detail::Prepared> regrouped;  // by partition (with more than one)
    std::vector<std::size_t> order;           // grouped index -> index in the batch
    struct Chunk {
      std::size_t first, last;
    };
    std::vector<Chunk> chunks;
    std::vector<std::string> marks;  // refusal marks, per partition
    std::vector<detail::Argv> argvs;
    std::uint64_t generation = 0;      // of the connection that wrote them (for the WAIT)
    std::vector<std::string> streams;  // the partitions' written to (for the WAIT)
    bool scripted = false;
    const std::vector<detail::Prepared>& grouped() const { return regrouped.empty() ? prepared : regrouped; }
    std::vector<detail::SharedCommand> commands();
  };

  // producer.cpp
  explicit Impl(ProducerOptions o);
  /// Answers the asynchronous calls still queued (their completions use this state) first.
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  static std::string first_partition(const ProducerOptions& o);
  /// Checks the task and builds its command (throws before anything is sent); a task that is
  /// merged (OneWrite::merged) gets no command of its own.
  void build_one(OneWrite& w);
  /// How a merged task's call ended: its id, or what its outcome says (QueueFullError, what
  /// ended the call). Without the WAIT for replicas.
  std::string finish_merged(const OneWrite& w, const detail::SharedOutcome& o);
  /// The task's id, or the refusal its reply says (QueueFullError, DuplicateTaskError, ReplyError).
  /// Without the WAIT for replicas.
  std::string finish_one(const OneWrite& w, const detail::Reply& reply);
  /// Producer::enqueue: the middleware (and the tracer) around enqueue_one.
  std::string enqueue_through_middleware(std::string_view task_type, std::string_view payload_json,
                                         const EnqueueOptions& task_options, std::size_t* partition);
  /// A batch's tasks, each through the middleware (and the tracer), with their ids set.
  std::vector<TaskSpec> through_middleware(const std::vector<TaskSpec>& tasks);
  /// enqueue without the middleware: one task written. `partition`: the partition it went to.
  std::string enqueue_one(std::string_view task_type, std::string_view payload_json,
                          const EnqueueOptions& task_options, std::size_t* partition = nullptr);
  /// A copy of the middleware, taken under their lock (use() may add one meanwhile).
  std::shared_ptr<const std::vector<ProducerMiddleware>> middleware_now();
  /// The waits' follower of the queue's events, made on the first wait.
  detail::Waiter& waiter();
  /// A wait on this thread: its outcome, turned into the record or an exception here. The waiter
  /// settles it by its deadline even while Redis is away (its deadline keeper).
  TaskRecord wait_here(const std::string& task_id, std::chrono::milliseconds timeout,
                       std::optional<std::size_t> partition, const WaitOptions& options);

  // prepare.cpp
  /// The partition of a task: by its tenant, else its batch, else its partition key, else its
  /// unique key, else the next in turn.
  int partition_of(const EnqueueOptions& eo, std::string_view unique_key);
  /// ConfigError for a tenant name too long or with a NUL, or one that cannot go with the task's
  /// other options.
  void check_tenant(const EnqueueOptions& eo) const;
  /// ConfigError for a debounce option that is malformed or cannot go with the task's others.
  static void check_debounce(const EnqueueOptions& eo);
  /// ConfigError naming `call` (enqueue_batch, enqueue_flow, a batch's callback) for a debounced
  /// task: only enqueue can answer with the id of the task a dropped call became.
  static void refuse_debounce(const EnqueueOptions& eo, std::string_view call);
  /// Checks one task and its per-call options; throws before anything is sent.
  detail::Prepared prepare(std::string_view type, std::string_view payload, const EnqueueOptions& eo,
                           std::string& id_storage, std::string_view created_at);
  /// XADD <stream> MAXLEN ~ <max_len> * fields... (the seed's command).
  detail::Argv trim_argv(const detail::Prepared& p) const;
  /// One enqueue script call for tasks [first, last), all of one partition; `refusal_mark` (the
  /// batch's in that partition, see the enqueue script) is empty for a call that is a whole batch.
  /// `refusal_mark` (with `position`, the chunk's 1-based place among its partition's chunks):
  /// the batch's mark, for a partition sent in more than one chunk (see the enqueue script).
  /// `to`: the keys of the stream written (a flow's placement in another queue), else the
  /// tasks' partition's.
  detail::Argv script_argv(const std::vector<detail::Prepared>& tasks, std::size_t first, std::size_t last,
                           const std::string& refusal_mark = {}, std::int64_t position = 0,
                           const detail::QueueKeys* to = nullptr) const;
  /// One enqueue script call, mode 'each', for plain tasks of one partition merged from single
  /// enqueues (MergedEnqueue): each admitted or refused on its own.
  detail::Argv merged_argv(const std::vector<const detail::Prepared*>& tasks) const;
  /// Whether a task needs the enqueue script even with Overflow::trim_oldest, and the
  /// script's 'full' layout (see enqueue.lua).
  static bool needs_script(const detail::Prepared& t);

  // batch.cpp
  std::vector<std::string> enqueue_many(const std::vector<TaskSpec>& tasks);
  /// Checks every task and builds the batch's commands (throws before anything is sent).
  void build_batch(BatchWrite& b, const std::vector<TaskSpec>& tasks);
  /// The batch's ids, or the refusal its replies say; chunks not run where they went are sent
  /// again here, on their own (a synchronous call on the shared connection). With the WAIT.
  std::vector<std::string> finish_batch(BatchWrite& b, std::vector<detail::Reply> replies);
  /// A batch some of whose commands Redis refused with `failure` (OOM, WRONGTYPE, a redirection
  /// that outlasted the retries, ...): that ReplyError, and when some tasks were written (`ids`,
  /// "" for the others) its message says which.
  [[noreturn]] void refuse_batch(const BatchWrite& b, const std::string& failure);

  // replication.cpp
  /// WAIT for min_replicas_acked replicas to have what this connection wrote (with a cluster
  /// URL: on every master written to since the last WAIT and on the masters of `keys`, a key of
  /// each slot the caller wrote, at the same time); how many did, the fewest of those masters'.
  /// A server that has just turned replica refuses WAIT: none did (with a sentinel URL the
  /// connection is dropped, so the next call asks the sentinels again).
  std::int64_t replicas_acknowledging(std::uint64_t written_on, const std::vector<std::string>& keys);
  /// WAIT min_replicas_acked replicas_ack_timeout.
  detail::Argv wait_argv() const;
  /// The fewest replicas that acknowledged, of the WAIT replies (0 for a server that turned replica).
  std::int64_t fewest_acknowledging(const std::vector<detail::Reply>& replies) const;
  /// ReplicationError when `acked` is fewer than min_replicas_acked.
  void check_replicas(const std::vector<std::string>& ids, std::int64_t acked) const;
  /// wait_for_replicas without blocking: `then` gets the ReplicationError (or null) on the
  /// completion thread. Calls made while a WAIT is queued and not yet sent, for writes of the
  /// same connection, join it: one WAIT answers them all (it follows all their writes).
  void replicas_then(std::vector<std::string> ids, std::uint64_t written_on, const std::string& key,
                     std::function<void(std::exception_ptr)> then);
  /// A WAIT queued on the shared connection and the calls it answers (replicas_then).
  struct QueuedWait {
    std::uint64_t written_on = 0;
    std::vector<std::string> keys;  // a key of each slot its callers wrote
    std::vector<std::pair<std::vector<std::string>, std::function<void(std::exception_ptr)>>> callers;
  };
  /// For a batch refused part-way (`ids`: the written ones, "" for the others): with
  /// min_replicas_acked, what the replicas acknowledged of the written part, for the refusal's
  /// message ("" when nothing was written, or the option is off).
  std::string replication_of_written(const std::vector<std::string>& ids, std::uint64_t written_on,
                                     const std::vector<std::string>& keys);
  /// With min_replicas_acked: WAIT for the replicas to have what this connection wrote (the
  /// tasks `ids`, just written, to the slots of `keys`), and ReplicationError when too few did
  /// in time.
  void wait_for_replicas(const std::vector<std::string>& ids, std::uint64_t written_on,
                         const std::vector<std::string>& keys);
  /// enqueue_flow across partitions: the enqueue calls ('placed') of a flow's children in other
  /// partitions than its home, each with its token and guard key.
  struct Placements {
    std::vector<detail::Argv> calls;
    std::vector<std::string> tokens;
    std::vector<std::string> guards;
  };
  /// Makes the placements the home's call (partition `home`) kept in its hash, and takes those
  /// made out of it.
  void place_away(int home, Placements& placements);

  // flow.cpp
  struct FlowWrite;
  /// Checks the flow and builds its call (throws before anything is sent).
  std::unique_ptr<FlowWrite> build_flow(const FlowNode& root);
  /// The flow's ids, or the refusal its reply says; places its tasks in other partitions and
  /// queues. Without the WAIT for replicas.
  FlowIds accept_flow(FlowWrite& w, const detail::Reply& reply);

  // workflow_batch.cpp
  struct BatchCall;
  /// open_batch's and close_batch's calls, checked and built (throws before anything is sent).
  std::unique_ptr<BatchCall> open_call(const BatchOptions& requested);
  std::unique_ptr<BatchCall> close_call(const std::string& batch_id);
  /// What a checked reply answers: the batch's id (open), whether this call closed it (close).
  static std::string opened(const BatchCall& c, const detail::Reply& reply);
  static bool closed_now(const BatchCall& c, const detail::Reply& reply);
  /// A batch call without blocking: built here (what that throws reaches `done`), answered on
  /// the completion thread.
  template <class T>
  void batch_call_async(const std::function<std::unique_ptr<BatchCall>()>& build,
                        std::function<T(const BatchCall&, const detail::Reply&)> answer,
                        std::function<void(std::exception_ptr, T)> done);

  ProducerOptions options;
  std::mutex middleware_mutex;
  std::shared_ptr<const std::vector<ProducerMiddleware>>
      middleware;  // Producer::use; replaced, never changed
  std::atomic<bool> has_middleware{false};
  detail::SharedConnection link;        // every thread's calls, pipelined together
  std::vector<detail::QueueKeys> keys;  // one per partition
  /// Overflow::reject: per partition, how its plain tasks' enqueues merge (OneWrite::merged).
  std::vector<std::unique_ptr<detail::MergedEnqueue>> merges;
  std::string max_len_text;
  std::atomic<unsigned> next_partition{0};  // the next task without a key goes to this mod partitions
  std::mutex waiter_mutex;
  std::unique_ptr<detail::Waiter> waiter_;
  std::mutex wait_mutex;
  std::shared_ptr<QueuedWait> next_wait;  // not yet sent: a replicas_then call may join it
};

}  // namespace streamq
