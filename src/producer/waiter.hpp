// SPDX-License-Identifier: MIT
// Producer::wait: the outcome of tracked tasks, from their records and their queue's events
// stream. One thread follows the events streams of every partition of the queue (XREAD
// BLOCK), reads the record of each new wait (marking it waited on: watch.lua) and completes
// the waits that the records or the final events answer. A second thread keeps the deadlines:
// a wait ends at its timeout whatever the first thread is doing (a frozen server holds it for
// the socket timeout). The first thread remembers the last final events it read, so a wait
// registered after its task ended, whose record went with its end (Retention::done = 0), is
// answered too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "redis/connection.hpp"
#include "redis/scripts.hpp"
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
  /// A wait on an id without a record fails this long after its first read (unless it waits
  /// for the enqueue): time for the record of a task enqueued at that moment to appear.
  static constexpr Millis kNoRecordGrace{1000};

  /// `queues`: the streams of the queue's partitions (one for a plain queue).
  Waiter(const ConnectionConfig& config, std::vector<std::string> queues);
  ~Waiter();
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  /// Registers a wait for the task: `deliver` is called once, with how it ended, on one of the
  /// waiter's threads, at the latest at `timeout` from now. Thread-safe; never blocks on
  /// Redis. `partition` (an index into the queues) when the caller knows it; otherwise every
  /// partition is asked. `for_enqueue`: a task without a record yet is waited for (it may be
  /// enqueued later) instead of failing after kNoRecordGrace.
  void wait(const std::string& task_id, Millis timeout, std::optional<std::size_t> partition,
            bool for_enqueue, std::function<void(WaitOutcome)> deliver);

 private:
  struct Pending {
    std::string task_id;
    std::vector<std::size_t> queues;  // the partitions it may be in (one, once known)
    Clock::time_point deadline;
    bool for_enqueue = false;
    std::function<void(WaitOutcome)> deliver;
    // The thread's alone:
    bool checked = false;                            // its record was read
    std::optional<Clock::time_point> missing_since;  // no record found then
    // Guarded by `mutex`:
    std::mutex mutex;
    bool answered = false;
    bool read = false;               // a read of its record was answered
    std::optional<TaskRecord> last;  // its record as last read
    std::string trouble;             // why the last read failed, if it did
    /// Delivers `o` unless answered already (the first answer wins). True when it did.
    bool answer(WaitOutcome o);
    bool is_answered();
    void note(std::optional<TaskRecord> record);
  };
  using PendingPtr = std::shared_ptr<Pending>;

  void run(const std::stop_token& stop);
  void keep_deadlines(const std::stop_token& stop);
  /// The records of `task_id` in `queues` (watch.lua on each, pipelined): the one found, if any.
  std::optional<TaskRecord> read_record(const std::string& task_id, std::vector<std::size_t>& queues);
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
  /// finished ones, and those without a record whose end the remembered final events tell.
  void check_records(bool all);
  /// Fails the waits without a record past kNoRecordGrace (read once more first), and forgets
  /// the answered ones.
  void sweep(Clock::time_point now);
  /// Remembers a final event (the last kRemembered of them).
  void remember(const QueueEvent& event, std::size_t queue);
  static void complete(Pending& p, const TaskRecord& r);
  /// Notes the record read of `p` and completes it when it tells the end: true then.
  static bool answered_by(Pending& p, std::optional<TaskRecord> r);
  static WaitOutcome timed_out(Pending& p);

  const std::vector<std::string> queues_;
  std::vector<std::string> events_;  // events stream of each queue
  Connection reader_;                // the thread's
  ScriptRunner scripts_{reader_};
  std::vector<std::string> positions_;  // the thread's: the last event id read of each stream
  // The thread's: the last final events read (a record gone with its task's end), by task id.
  std::unordered_map<std::string, std::pair<TaskRecord, std::size_t>> ended_;
  std::deque<std::string> ended_order_;

  std::mutex mutex_;  // incoming_, deadlines_
  std::condition_variable_any cv_;
  std::condition_variable_any deadline_cv_;
  std::vector<PendingPtr> incoming_;  // registered, not yet taken by the thread
  std::multimap<Clock::time_point, std::weak_ptr<Pending>> deadlines_;
  // The thread's alone (the destructor's once it has ended): the waits it serves, by task id.
  std::multimap<std::string, PendingPtr> waiting_;
  std::jthread thread_;
  std::jthread deadline_thread_;
};

}  // namespace streamq::detail
