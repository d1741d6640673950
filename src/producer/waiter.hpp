// SPDX-License-Identifier: MIT
// Producer::wait: the outcome of tracked tasks, from their records and their queue's events
// stream. One thread follows the events streams of every partition of the queue (XREAD
// BLOCK) and completes the waits their final events answer; a wait first reads the task's
// record, so a task that finished before the wait began is answered at once. Two connections:
// the thread's, and one for the reads a wait starts with.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "redis/connection.hpp"
#include "streamq/record.hpp"

namespace streamq::detail {

using Clock = std::chrono::steady_clock;

/// How a wait ended: the record of a task done, or what to throw. The exception is built on
/// the thread that takes the outcome: one built on the waiter's thread and handed over through a
/// future is destroyed by whichever thread lets go of it last, a hand-over ThreadSanitizer
/// cannot follow into libstdc++.
struct WaitOutcome {
  enum class Kind { done, failed, timed_out };
  Kind kind = Kind::done;
  std::optional<TaskRecord> record;
  std::string message;
  /// The record, or throws TaskFailedError (failed) or WaitTimeoutError (timed_out).
  TaskRecord take() &&;
};

class Waiter {
 public:
  /// `queues`: the streams of the queue's partitions (one for a plain queue).
  Waiter(const ConnectionConfig& config, std::vector<std::string> queues);
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  /// Registers a wait for the task: `deliver` is called once, with how it ended (on this
  /// thread when the task had finished already, else on the waiter's thread). Thread-safe.
  /// `partition` (an index into the queues) when the caller knows it; otherwise every
  /// partition is asked. Throws what the first read of the record throws.
  void wait(const std::string& task_id, Millis timeout, std::optional<std::size_t> partition,
            std::function<void(WaitOutcome)> deliver);

 private:
  struct Pending {
    std::string task_id;
    std::vector<std::size_t> queues;  // the partitions it may be in (one, once known)
    Clock::time_point deadline;
    std::function<void(WaitOutcome)> deliver;
    std::optional<TaskRecord> last;  // its record as last read
    bool checked = false;            // the thread has read its record
  };

  void run(const std::stop_token& stop);
  /// The records of `task_id` in `queues` (pipelined HGETALL on `conn`): the one found, if any.
  std::optional<TaskRecord> read_record(Connection& conn, const std::string& task_id,
                                        std::vector<std::size_t>& queues);
  /// Reads the events after the positions (blocking up to `block`); returns the ids of the
  /// tasks whose final event came, and whether a stream gave a full page (it may have been
  /// trimmed past events not read).
  bool read_events(Millis block, std::vector<std::pair<QueueEvent, std::size_t>>& finished);
  /// Settles the waits of `task_id` from the record read now (or, when the record is gone,
  /// from `fallback`, the final event's record).
  void settle(const std::string& task_id, std::size_t queue, const std::optional<TaskRecord>& fallback);
  /// Moves the registered waits into waiting_.
  void adopt();
  /// Reads the records of the waits not read yet (`all`: of every wait), completes the
  /// finished ones.
  void check_records(bool all);
  /// Times out the waits whose deadline passed.
  void expire(Clock::time_point now);
  static void complete(Pending& p, const TaskRecord& r);

  const std::vector<std::string> queues_;
  std::vector<std::string> events_;  // events stream of each queue
  Connection reader_;                // the thread's
  Connection looker_;                // the first reads of wait(), under look_mutex_
  std::mutex look_mutex_;
  std::vector<std::string> positions_;  // the thread's: the last event id read of each stream

  std::mutex mutex_;  // incoming_
  std::condition_variable_any cv_;
  std::vector<std::unique_ptr<Pending>> incoming_;  // registered, not yet taken by the thread
  // The thread's alone (the destructor's once it has ended): the waits it serves, by task id.
  std::multimap<std::string, std::unique_ptr<Pending>> waiting_;
  std::jthread thread_;
};

}  // namespace streamq::detail
