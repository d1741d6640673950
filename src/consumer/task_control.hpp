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

enum class StopWhy : std::uint8_t { none, timeout, deadline, cancelled };

/// "", "timeout", "deadline", "cancelled" (also the dead-letter reasons of the first two).
std::string_view to_string(StopWhy why) noexcept;

struct TaskControl {
  /// The task's stop_token comes from here.
  std::stop_source stop;

  /// Asks the task to stop for `why` (none: the worker stops; the attempt's outcome does not
  /// change). A cancel wins over an earlier timeout or deadline; otherwise the first reason
  /// stays. Nothing changes once the handler returned (its outcome is being decided). The
  /// handler's own stop_callbacks run here, on the calling thread. Thread-safe.
  void request(StopWhy why) {
    {
      std::lock_guard lock(mutex);
      if (returned) return;
      if (why != StopWhy::none &&
          (reason.load(std::memory_order_relaxed) == StopWhy::none || why == StopWhy::cancelled)) {
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
};

}  // namespace streamq::detail
