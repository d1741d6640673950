// SPDX-License-Identifier: MIT
// What happens to a task after a worker takes it: its state record (kept for tasks enqueued
// with a Retention) and the events of its queue.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "streamq/common.hpp"
#include "streamq/errors.hpp"
#include "streamq/export.hpp"

namespace streamq {

/// The state record of a tracked task (Producer::wait, Inspector::record).
struct STREAMQ_EXPORT TaskRecord {
  enum class State {
    queued,     ///< in its stream, not started yet
    delayed,    ///< in the delayed set, waiting for its due time
    running,    ///< a worker started it (if that worker died, until another reclaims it)
    retrying,   ///< an attempt failed; the retry waits (in the delayed set or its stream)
    done,       ///< its handler returned
    dead,       ///< dead-lettered
    cancelled,  ///< cancelled by an operator (Inspector::cancel): before it ran, or while it ran
    waiting,    ///< a flow's parent, waiting for its children (Producer::enqueue_flow)
  };
  std::string task_id;
  std::string task_type;
  State state = State::queued;
  /// Handler starts so far (each attempt, and each run again after a worker died).
  std::int64_t attempts = 0;
  /// The server's clock.
  std::optional<std::chrono::system_clock::time_point> enqueued_at{};
  std::optional<std::chrono::system_clock::time_point> started_at{};
  std::optional<std::chrono::system_clock::time_point> finished_at{};
  /// Retrying, delayed: when it is due.
  std::optional<std::chrono::system_clock::time_point> due_at{};
  /// The consumer that started it last.
  std::string worker;
  /// The last failure's error (retrying, dead), and a dead task's reason (max_retries, ...).
  std::string error;
  std::string reason;
  /// What the handler returned (Task::set_result), or last wrote while it ran
  /// (Task::write_partial_result); unset when nothing was.
  std::optional<std::string> result{};
  /// What it reported last (Task::set_progress), as JSON text.
  std::optional<std::string> progress{};
  /// The stream whose record it is (a partition's, in a partitioned queue).
  std::string queue;
  /// A flow's task (Producer::enqueue_flow): the id of the parent that waits for it (empty for
  /// the root and for a task outside a flow), and a parent's children's ids, in order.
  std::string parent;
  /// A child in another partition or queue than its parent (FlowNode::queue): the stream its
  /// parent's record is in (a partition's, in a partitioned queue; Inspector::record takes it as
  /// the queue); empty when its parent is beside it.
  std::string parent_queue;
  std::vector<std::string> children;
  /// Those of `children` in another queue (FlowNode::queue): that queue (its stream, as
  /// FlowQueue::stream names it), by child id.
  std::map<std::string, std::string> child_queues;

  /// Whether it is done, dead or cancelled.
  bool finished() const noexcept {
    return state == State::done || state == State::dead || state == State::cancelled;
  }
  /// The result parsed as JSON. @throws nlohmann::json::parse_error when it is not JSON,
  ///   std::out_of_range when there is none.
  nlohmann::json result_json() const;
  /// A JSON object of every field (times as ms since the Unix epoch; bytes that are not UTF-8
  /// replaced). `result` and `progress` are JSON values when they hold JSON (a typed handler's
  /// return, set_progress), strings otherwise; null when there is none.
  std::string to_json() const;
};

/// "queued", "delayed", "running", "retrying", "done", "dead", "cancelled" or "waiting".
STREAMQ_EXPORT std::string_view to_string(TaskRecord::State s) noexcept;
STREAMQ_EXPORT std::optional<TaskRecord::State> parse_record_state(std::string_view s) noexcept;

/// One entry of a queue's events stream (`<stream>:events`, about the last 10,000 changes of
/// its tracked tasks).
struct STREAMQ_EXPORT QueueEvent {
  /// The entry's id; pass it back to read on after it.
  std::string id;
  /// enqueued, started, progress, retry, handed_back, done, dead, cancelled, released (a flow's
  /// parent enqueued once its children finished) or child_ended (of a flow's parent: one of its
  /// children ended; fields child, state and pending, the children it still waits for).
  std::string event;
  std::string task_id;
  /// When (the server's clock).
  std::chrono::system_clock::time_point at{};
  /// The event's other fields, in order (state, attempt, worker, error, reason, progress, ...).
  std::vector<std::pair<std::string, std::string>> fields;
  /// The stream it was read from (a partition's, in a partitioned queue).
  std::string queue;
};

/// Producer::wait: the task ended dead or cancelled. what() says which, with its last error;
/// record() is its record.
class STREAMQ_EXPORT TaskFailedError : public Error {
 public:
  TaskFailedError(const std::string& what, TaskRecord record) : Error(what), record_(std::move(record)) {}
  const TaskRecord& record() const noexcept { return record_; }

 private:
  TaskRecord record_;
};

/// Producer::wait: the task did not finish within the time given, or no record of it was found
/// (it was not enqueued with a Retention, its record expired, or it is another queue's).
/// record() is its record as last read, when there is one.
class STREAMQ_EXPORT WaitTimeoutError : public Error {
 public:
  WaitTimeoutError(const std::string& what, std::optional<TaskRecord> record)
      : Error(what), record_(std::move(record)) {}
  const std::optional<TaskRecord>& record() const noexcept { return record_; }

 private:
  std::optional<TaskRecord> record_;
};

}  // namespace streamq
