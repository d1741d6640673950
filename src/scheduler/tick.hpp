// SPDX-License-Identifier: MIT
// One schedule as a running Scheduler holds it, and the handling of its due ticks: each tick
// is one call of the schedule_tick script, which decides in Redis whether this instance
// enqueues it (docs/scheduling.md, "Guarantees").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "redis/scripts.hpp"
#include "scheduler/definition.hpp"
#include "streamq/scheduler.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

using TimePoint = std::chrono::system_clock::time_point;

/// A stored definition as one instance runs it.
struct RunningDefinition {
  Definition def;
  int max_retries = 3;       // resolved: the schedule's, else the queue's default
  std::int64_t version = 0;  // the record's `version` this was read at
};

/// One schedule of a running Scheduler.
struct ScheduleEntry {
  RunningDefinition current;
  /// The definition before the switch this instance saw happen (its version was running here
  /// when the record moved on): its ticks at or before `since` are still handled, then it is
  /// dropped. Unset: none.
  std::optional<RunningDefinition> previous;
  TimePoint since{};
  /// No tick at or before it (resume()'s time).
  TimePoint floor{};
  bool paused = false;
  QueueKeys keys;                    // of the partition its ticks go to
  std::string key;                   // <stream>:sched:<name>, in that partition
  std::optional<TimePoint> handled;  // newest tick this instance got an answer for
};

/// The Scheduler's counters (SchedulerMetrics).
struct TickCounters {
  std::atomic<std::uint64_t> enqueued{0};
  std::atomic<std::uint64_t> taken{0};
  std::atomic<std::uint64_t> skipped{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> reconnects{0};
  std::atomic<std::uint64_t> reloads{0};
};

/// What handle_ticks found.
enum class TickHandled {
  done,   ///< the due ticks were handled (or none was due)
  stale,  ///< the record holds a newer definition (or none): re-read it before ticking again
};

/// Hands `e`'s due ticks at `now` to the schedule_tick script (those this instance did not get
/// an answer for yet). Throws ConnectionError / ReplyError.
TickHandled handle_ticks(ScheduleEntry& e, TimePoint now, ScriptRunner& scripts,
                         const SchedulerOptions& options, TickCounters& counters);

/// When `e` next has something to do after `now` (its next tick); TimePoint::max() when never.
TimePoint next_wake(const ScheduleEntry& e, TimePoint now);

}  // namespace streamq::detail
