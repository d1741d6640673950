// SPDX-License-Identifier: MIT
// What the consumer keeps of a task while its handler runs, shared by the handler thread, the
// watchdog (timeouts and deadlines), the lease keeper (an operator's cancel) and the shutdown
// (the worker stops): the task's own stop source, why it was asked to stop, and whether its
// handler returned or was given up on. One per started task.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "inflight.hpp"
#include "streamq/consumer_options.hpp"
#include "streamq/tracing.hpp"

namespace streamq::detail {

class TaskReports;

/// Why a task was asked to stop. `shutdown`: its worker stops (the weakest: any other reason
/// replaces it). `lease_lost`: its holder could not renew a concurrency slot's lease in time
/// (refused, or Redis out of reach for most of the lease): it fences itself, the task is put back.
enum class StopWhy : std::uint8_t { none, timeout, deadline, cancelled, shutdown, lease_lost };

/// "", "timeout", "deadline", "cancelled", "shutdown", "lease_lost" (the first two also the
/// dead-letter reasons).
std::string_view to_string(StopWhy why) noexcept;

struct TaskControl {
  /// The task's stop_token comes from here.
  std::stop_source stop;

  /// Asks the task to stop for `why`. A cancel wins over any earlier reason, any reason over
  /// `shutdown` (the worker's stop decides nothing if the task is stopped for a reason of its
  /// own); otherwise the first reason stays. Nothing changes once the handler returned (its
  /// outcome is being decided). The handler's own stop_callbacks run here, on the calling
  /// thread. Thread-safe.
  void request(StopWhy why) {
    {
      std::lock_guard lock(mutex);
      if (returned) return;
      const StopWhy now = reason.load(std::memory_order_relaxed);
      if (why != StopWhy::none &&
          (now == StopWhy::none || now == StopWhy::shutdown || why == StopWhy::cancelled)) {
        reason.store(why, std::memory_order_release);
      }
    }
    stop.request_stop();
  }
  StopWhy why() const noexcept { return reason.load(std::memory_order_acquire); }

  std::atomic<StopWhy> reason{StopWhy::none};  // written under `mutex`

  // Guarded by `mutex`: the handler thread sets `returned` when its handler is back, before the
  // task it points at goes away; the watchdog gives the task up (`abandoned`) only before that,
  // building its completion from these pointers.
  std::mutex mutex;
  bool returned = false;
  bool abandoned = false;
  const Work* work = nullptr;
  const Task* task = nullptr;
  const HandlerOptions* options = nullptr;
  std::shared_ptr<TaskReports> reports;
  Span* span = nullptr;          // the attempt's span (ConsumerOptions::tracer), if any
  std::string_view given_up_as;  // the outcome give_up() wrote, for the span's end

  // Set before the handler starts, constant after: the task's id (for logs), and the
  // concurrency slots it holds (ConcurrencyLimit: the semaphores' keys, and its holder name).
  std::string task_id;
  std::vector<std::string> slot_keys;
  std::string slot_holder;

  // Whether the watchdog ever set a timer for it: most tasks have none, and their end then
  // costs no lock of the watchdog's. (A timer set after the end was seen finds it returned.)
  std::atomic<bool> watched{false};
  // The watchdog's timer of this task, guarded by the watchdog's mutex.
  std::optional<std::multimap<Clock::time_point, std::weak_ptr<TaskControl>>::iterator> timer;
  bool hard = false;                    // the timer is the give-up, not the soft stop
  StopWhy soft_why = StopWhy::timeout;  // what the soft stop asks
  // Its fence (Watchdog::fence), guarded by the watchdog's mutex: when its concurrency slots
  // were last known held for a lease from then, by this process's clock.
  std::optional<std::multimap<Clock::time_point, std::weak_ptr<TaskControl>>::iterator> fence_timer;

  // Until when its leases are known to hold (lease_time(); 0: not known yet), for the dead man's
  // switch of a child process (HandlerExecutor::process): its entry's, as the watchdog's sweep
  // last saw it, and its concurrency slots' fence (Watchdog::fence).
  std::atomic<std::int64_t> entry_lease_until{0};
  std::atomic<std::int64_t> slot_lease_until{0};
};

/// A steady-clock time as nanoseconds (the clock is the machine's CLOCK_MONOTONIC, the same in
/// every process), for what other processes read.
inline std::int64_t lease_time(Clock::time_point at) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

}  // namespace streamq::detail
