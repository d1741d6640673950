// SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "streamq/export.hpp"

namespace streamq {

/// Names of the wire-format fields (compatible with the seed's Python queue).
namespace field {
inline constexpr std::string_view task_id = "task_id";
inline constexpr std::string_view task_type = "task_type";
inline constexpr std::string_view payload = "payload";
inline constexpr std::string_view created_at = "created_at";
inline constexpr std::string_view max_retries = "max_retries";
inline constexpr std::string_view retry_count = "retry_count";
inline constexpr std::string_view last_error = "last_error";
/// The unique key of a task enqueued with EnqueueOptions::unique_for (its lock is
/// `<stream>:unique:<unique_key>`), so the consumer can release it.
inline constexpr std::string_view unique_key = "unique_key";
/// The retention of a tracked task (EnqueueOptions::retention): "<done ms> <dead ms>", dead -1
/// for "as long as its dead letter". Its presence makes the task tracked (TaskRecord).
inline constexpr std::string_view retention = "retention";
/// The time by which a task must have finished (EnqueueOptions::deadline): ms since the Unix
/// epoch, decimal.
inline constexpr std::string_view deadline = "deadline";
/// The W3C trace context of the producer's span (`traceparent`, `tracestate`), when a Tracer
/// injected one (see streamq/tracing.hpp), and of the failed attempt a retry follows
/// (`retry_of_span`, a traceparent): a consumer's attempt continues the first and links the
/// second.
inline constexpr std::string_view traceparent = "traceparent";
inline constexpr std::string_view tracestate = "tracestate";
inline constexpr std::string_view retry_of_span = "retry_of_span";
/// A flow's task (Producer::enqueue_flow): the id of the parent that waits for it, and what its
/// failure does to that parent ("fail", "ignore" or "remove", see ChildFailure).
inline constexpr std::string_view flow_parent = "flow_parent";
inline constexpr std::string_view flow_on_failure = "flow_on_failure";
/// A flow's child in another partition than its parent: the parent's partition (its stream),
/// where the child's outcome is carried (see docs/workflows.md, "Flows across partitions").
inline constexpr std::string_view flow_home = "flow_home";
/// A parent's children as they ended, written when the last one finished (Task::children_results).
inline constexpr std::string_view flow_children = "flow_children";
/// The batch a task belongs to (EnqueueOptions::batch), and on a batch's callback the batch it
/// was enqueued for.
inline constexpr std::string_view batch_id = "batch_id";
/// The tenant a task belongs to (EnqueueOptions::tenant): it waits in its tenant's backlog and
/// runs in its tenant's turn (docs/tenants.md). Prefixed, unlike the others: "tenant" is a
/// common name of users' own extra fields, which must keep meaning only what they meant.
inline constexpr std::string_view tenant = "streamq_tenant";
// Added to dead-lettered entries.
inline constexpr std::string_view error = "error";
inline constexpr std::string_view failed_at = "failed_at";
inline constexpr std::string_view original_id = "original_id";
inline constexpr std::string_view consumer = "consumer";
inline constexpr std::string_view reason = "reason";
}  // namespace field

/// Ordered field/value pairs of one stream entry, bytes as stored.
using Fields = std::vector<std::pair<std::string, std::string>>;

/// How one child of a flow ended, as its parent reads it (Task::children_results).
struct STREAMQ_EXPORT ChildResult {
  std::string task_id;
  /// "done", or "dead" / "cancelled" for a child whose failure the parent ignores
  /// (ChildFailure::ignore).
  std::string state;
  /// What a done child returned (its record's result; empty when it returned nothing).
  std::string result;
  /// Why a failed child failed: its last error (or reason), or "cancelled".
  std::string error;

  bool succeeded() const noexcept { return state == "done"; }
  /// The result parsed as JSON and converted to T (nlohmann's from_json), as Consumer::on<T>
  /// reads a payload. @throws nlohmann::json::exception when it is not JSON or not a T.
  template <class T>
  T as() const {
    return nlohmann::json::parse(result).get<T>();
  }
};

namespace detail {
class TaskReports;   // where a running tracked task's result and progress go (src/consumer)
struct TaskControl;  // why a running task was asked to stop (src/consumer)
struct TaskAccess;   // lets the consumer attach them
struct TaskFactory;  // builds a Task from a stream entry (src/wire/codec.cpp)
}  // namespace detail

/// A task as a handler sees it: decoded and validated before the handler runs.
///
/// Thread safety: a Task is immutable once built (json() parses once, safely from any thread);
/// the handler gets a const reference that is valid until it returns.
class STREAMQ_EXPORT Task {
 public:
  Task() = default;
  /// The task id (`task_id`): stays the same across retries.
  const std::string& id() const noexcept { return value_at(id_index_); }
  /// The handler key (`task_type`).
  const std::string& type() const noexcept { return value_at(type_index_); }
  /// The payload as JSON text, exactly as stored.
  const std::string& payload() const noexcept { return value_at(payload_index_); }
  /// The parsed payload, parsed on the first call. @throws std::bad_alloc only.
  const nlohmann::json& json() const;
  /// Retries done before this attempt (0 on the first).
  int retry_count() const noexcept { return retry_count_; }
  /// Retries allowed after the first attempt.
  int max_retries() const noexcept { return max_retries_; }
  /// When the task was first enqueued (`created_at`, UTC).
  std::chrono::system_clock::time_point created_at() const noexcept { return created_at_; }
  /// The stream entry id of this attempt (changes on every retry).
  const std::string& entry_id() const noexcept { return entry_id_; }
  /// Which attempt at this stream entry this is: 1 on first delivery, +1 each time it runs
  /// again after its worker died or lost it (a retry is a new entry and starts at 1).
  std::int64_t deliveries() const noexcept { return deliveries_; }
  /// Every field of the entry, including extra ones, in stored order.
  const Fields& fields() const noexcept;
  /// The value of one field, if present.
  std::optional<std::string_view> field(std::string_view name) const noexcept;

  /// True once this task should stop: the worker running it is stopping (Consumer::stop(), or
  /// SIGINT/SIGTERM with stop_on_signals), its timeout (HandlerOptions::timeout) or deadline
  /// (EnqueueOptions::deadline) passed, or an operator cancelled it (Inspector::cancel). A long
  /// handler checks it (or waits on stop_token()) and ends early. When the worker stops,
  /// returning completes the task and throwing hands it back uncounted
  /// (HandlerOptions::hand_back_on_shutdown); after a timeout, a deadline or a cancel the
  /// attempt ends as that, whatever the handler does; after a lost lease (the worker could not
  /// renew it, and another may take the task over) returning completes the task and throwing
  /// puts it back uncounted (see stop_reason()). Handlers still running when the shutdown grace
  /// period ends keep running, but the Consumer no longer waits for them.
  bool stop_requested() const noexcept { return stop_.stop_requested(); }
  /// Why stop_requested() is true: "" (not asked to stop), "shutdown" (the worker is
  /// stopping), "timeout", "deadline", "cancelled" or "lease_lost" (its entry's or a
  /// concurrency slot's lease could not be renewed in time, or another consumer took the
  /// entry, or, its entry having been deleted while it ran, the note of its dead-letter record
  /// expired). Thread-safe.
  std::string_view stop_reason() const noexcept;
  /// The same as a std::stop_token, e.g. for std::condition_variable_any::wait or a
  /// std::stop_callback. A stop_callback runs on the thread that asks the task to stop (the
  /// consumer's watchdog for a timeout, a deadline or a fence, its lease keeper or cancel
  /// follower for a cancel, the thread
  /// calling Consumer::stop): keep it short and non-blocking.
  const std::stop_token& stop_token() const noexcept { return stop_; }

  /// A flow's parent (Producer::enqueue_flow): its children as they ended, in the order they
  /// were given, written into the parent's entry by the script that finished its last child.
  /// A child removed by its failure (ChildFailure::remove) is not among them; one whose failure
  /// the parent ignores is, with its state and error. Empty for a task that is not a parent.
  /// Parsed on each call. @throws std::runtime_error when the field is malformed (not written
  /// by streamq).
  std::vector<ChildResult> children_results() const;

  /// Whether the task is tracked (enqueued with EnqueueOptions::retention): only then do the
  /// calls below keep anything. Untracked, they do nothing.
  bool tracked() const noexcept;
  /// The result this attempt ends with when the handler returns (bytes: JSON text, or any
  /// other): written with the task's completion, in the same script, to its record
  /// (TaskRecord::result, what Producer::wait returns). No round trip of its own; the last call
  /// wins. A typed handler that returns a value (Consumer::on<T>) sets its JSON.
  /// Thread-safe.
  void set_result(std::string bytes) const;
  /// Writes `bytes` to the record as the result so far (visible to Inspector::record and
  /// `streamq task` while the task runs), and as the result it ends with unless set_result or
  /// another call replaces it. No round trip: the worker's completer writes it (the report
  /// script, only while the record says this worker runs the task and its entry is still this
  /// worker's), at once or, within 100 ms of this task's last report write, with the next one
  /// (the latest value wins), and at the latest when the handler returns, before the task's
  /// completion. True when it is written or held to be; false when the task is untracked, the
  /// handler returned, or an earlier report of this attempt was refused (a stale holder: its
  /// entry was taken over). Thread-safe; not after the handler returned.
  bool write_partial_result(const std::string& bytes) const;
  /// Reports progress (a number, or any JSON): written to the record's `progress` and as a
  /// `progress` event of the queue's events stream, as write_partial_result writes (coalesced:
  /// at most one write per 100 ms per task, the latest value wins, the last one written before
  /// the completion), so a handler may call it in a tight loop. Returns as
  /// write_partial_result. Thread-safe; not after the handler returned.
  bool set_progress(const nlohmann::json& progress) const;

  Task(const Task& other);
  Task& operator=(const Task& other);
  Task(Task&& other) noexcept;
  Task& operator=(Task&& other) noexcept;
  ~Task() = default;

 private:
  /// A task whose payload (the `payload` field, already validated as JSON) is parsed on the
  /// first json() call: a handler that reads only payload() never pays for a parse.
  /// `stop` is the worker's stop token (see stop_requested()); a default token never stops.
  Task(std::string entry_id, std::shared_ptr<const Fields> fields, std::int64_t deliveries,
       std::chrono::system_clock::time_point created_at, int retry_count, int max_retries,
       std::stop_token stop);

  enum : std::uint8_t { json_unparsed, json_parsing, json_ready };
  const std::string& value_at(std::size_t index) const noexcept;

  std::string entry_id_;
  std::shared_ptr<const Fields>
      fields_;  // shared with the consumer, which may need them after a crash-safe move
  // Positions in fields_ (npos when absent), so the payload bytes are stored once.
  std::size_t id_index_ = static_cast<std::size_t>(-1);
  std::size_t type_index_ = static_cast<std::size_t>(-1);
  std::size_t payload_index_ = static_cast<std::size_t>(-1);
  mutable nlohmann::json payload_;
  mutable std::atomic<std::uint8_t> json_state_{json_ready};  // an empty Task's payload is null
  std::int64_t deliveries_ = 1;
  std::chrono::system_clock::time_point created_at_{};
  int retry_count_ = 0;
  int max_retries_ = 3;
  std::stop_token stop_;
  std::shared_ptr<detail::TaskReports> reports_;        // set by the consumer for a tracked task
  std::shared_ptr<const detail::TaskControl> control_;  // set by the consumer for the handler
  friend struct detail::TaskAccess;
  friend struct detail::TaskFactory;
};

}  // namespace streamq
