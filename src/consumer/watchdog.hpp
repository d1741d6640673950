// SPDX-License-Identifier: MIT
// The watchdog: one thread (started on first need) that enforces the time limits of running
// tasks. At a task's timeout or deadline it asks the task to stop (its stop_token); if the
// handler has not returned ConsumerOptions::timeout_grace later, or that long after an
// operator's cancel reached it, the task is given up: its completion (a retry, a dead letter,
// or cancelled) is handed to the completer as if the handler had returned, and what the
// handler's thread does afterwards is dropped. The thread itself cannot be stopped; it stays
// busy until the handler returns.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "shared.hpp"
#include "task_control.hpp"

namespace streamq::detail {

class Watchdog {
 public:
  explicit Watchdog(Shared& shared) : s_(shared) {}
  ~Watchdog() { stop(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// At `at` ask `c` to stop for `why` (timeout or deadline); timeout_grace later give it up.
  void arm(const std::shared_ptr<TaskControl>& c, Clock::time_point at, StopWhy why);
  /// `c` was asked to stop (a cancel): give it up timeout_grace from now unless it returned
  /// (or an earlier give-up is set).
  void asked(const std::shared_ptr<TaskControl>& c);
  /// `c` holds leases (its entry's, its concurrency slots') last known to run past `at` (see
  /// fence_after): at `at`, unless moved on by a later renewal, its holder fences itself: the task
  /// is asked to stop (lease_lost) and given up timeout_grace later. Replaces an earlier fence.
  void fence(const std::shared_ptr<TaskControl>& c, Clock::time_point at);
  /// From now on, fences every running task by its entry's lease as well: a task whose entry's
  /// lease was last renewed (InFlight's lease time) fence_after(claim_min_idle) ago is asked to
  /// stop (lease_lost) and given up timeout_grace later, so a holder cut off from Redis, or
  /// frozen, stops before another worker may reclaim the entry. Looked at by a sweep of the
  /// running tasks every sweep_period(), on the watchdog's thread: nothing per task.
  void watch_entry_leases();
  /// The handler of `c` returned: its timers go.
  void disarm(TaskControl& c);
  /// Ends the thread; timers not yet due are dropped.
  void stop();

 private:
  using Timers = std::multimap<Clock::time_point, std::weak_ptr<TaskControl>>;
  void set_locked(const std::shared_ptr<TaskControl>& c, Clock::time_point at, bool hard);
  void main(const std::stop_token& stop);
  void fire(const std::shared_ptr<TaskControl>& c, bool hard, StopWhy soft_why);
  /// Asks `c` to stop for lease_lost (unless it returned, or was asked to stop for another
  /// reason), with its give-up timeout_grace later; logs `what` could not be renewed.
  void fence_now(const std::shared_ptr<TaskControl>& c, std::string_view what);
  /// The entry-lease sweep (see watch_entry_leases).
  void sweep_entry_leases();

  Shared& s_;
  std::mutex mutex_;
  std::condition_variable_any cv_;
  Timers timers_;
  Timers fences_;
  bool sweeping_ = false;  // watch_entry_leases() was called
  Clock::time_point next_sweep_ = Clock::time_point::max();
  std::jthread thread_;
  bool stopped_ = false;
};

/// How long after a renewal of a `lease` (an entry's or a slot's, sent at that time) its holder
/// stops the task: four fifths of the lease, so a handler asked to stop (a child process killed)
/// has the last fifth to end before another worker may take the entry or the slot.
constexpr Millis fence_after(Millis lease) { return lease * 4 / 5; }

/// How long after a renewal of an entry's `lease` a child process's dead man's switch (see
/// process_pool.hpp) kills it: after the worker's own fence (a live worker stops its child
/// first), before the lease ends (a frozen worker's child is gone before another worker may
/// take its task over).
constexpr Millis dead_man_after(Millis lease) { return lease * 9 / 10; }

/// How often the watchdog looks at the running tasks' entry leases: a quarter of a heartbeat
/// (and a tenth of the lease at most), so a fence comes well within the lease's last fifth
/// (which is at least 0.6 heartbeats: claim_min_idle >= 3 heartbeats).
constexpr Millis sweep_period(Millis heartbeat, Millis lease) {
  return std::max(Millis(1), std::min(heartbeat / 4, lease / 10));
}

/// The completion of a task given up on (see Watchdog): what its handler's return would have
/// given for the reason it was asked to stop. Called with c.mutex held and c.returned false.
Completion give_up(Shared& s, TaskControl& c);

}  // namespace streamq::detail
