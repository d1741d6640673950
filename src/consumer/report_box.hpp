// SPDX-License-Identifier: MIT
// A running tracked task's reports (Task::set_progress, write_partial_result) on their way to
// Redis. The handler only holds a value here (the latest of each kind wins); the completer
// writes what is held (report.lua), at most once per kReportEvery for each task, and at once
// when the handler has returned, ahead of the task's completion. So a handler may report in a
// tight loop, and no report costs its thread a round trip.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "inflight.hpp"

namespace streamq::detail {

/// The shortest time between two report writes of one task.
inline constexpr std::chrono::milliseconds kReportEvery{100};

class ReportBox {
 public:
  ReportBox(EntryKey key, std::string task_id) : key(std::move(key)), task_id(std::move(task_id)) {}
  const EntryKey key;  // the attempt's entry: a report is written only while this consumer holds it
  const std::string task_id;

  /// What hold() asks of its caller.
  struct Hold {
    bool accepted = false;                   // false: refused before, or closed: nothing kept
    std::optional<Clock::time_point> due{};  // queue the box for the completer, due then
  };
  /// Holds `value` as the latest `what` ("progress" or "result").
  Hold hold(std::string_view what, std::string value);

  /// What the completer writes.
  struct Held {
    std::optional<std::string> progress;
    std::optional<std::string> result;
    bool empty() const { return !progress && !result; }
  };
  /// The completer takes what is held; the next write is due kReportEvery after `now`.
  Held take(Clock::time_point now);
  /// A write the completer could not make now: held again unless newer values came meanwhile.
  /// Returns whether the box must be queued again.
  bool put_back(Held held);
  /// The write was refused (report.lua: the record does not say this consumer runs the task):
  /// later reports are dropped.
  void refuse();
  /// The handler returned: nothing more is held. What is held already is due now (returned:
  /// queue the box then), or dropped with `drop_held` (a task given up on).
  std::optional<Clock::time_point> close(bool drop_held);

 private:
  std::mutex mutex_;
  Held held_;
  Clock::time_point next_write_{};
  bool queued_ = false;
  bool refused_ = false;
  bool closed_ = false;
};

}  // namespace streamq::detail
