// SPDX-License-Identifier: MIT
// One schedule as a running Scheduler holds it, and the handling of its due ticks: each tick
// is one call of the schedule_tick script (tick_script.hpp), which decides in Redis whether
// this instance enqueues it (docs/scheduling.md, "Guarantees"). Which ticks are due (start,
// end, jitter, catch-up) is decided here; what a tick finds (limit, overlap, the backlog) there.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "redis/scripts.hpp"
#include "scheduler/definition.hpp"
#include "scheduler/tick_script.hpp"
#include "streamq/scheduler.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

using TimePoint = std::chrono::system_clock::time_point;

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
  /// The record's tick when it was read (no tick at or before it can be enqueued any more).
  std::optional<TimePoint> recorded;
  /// A tick the record keeps for Overlap::buffer_one, as this instance last heard.
  std::optional<TimePoint> buffered;
  /// `limit` ticks were enqueued: no more wake-ups for it.
  bool exhausted = false;
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
/// an answer for yet), oldest first, and the buffered tick once more. Throws ConnectionError /
/// ReplyError.
TickHandled handle_ticks(ScheduleEntry& e, TimePoint now, ScriptRunner& scripts,
                         const SchedulerOptions& options, TickCounters& counters);

/// When `e` next has something to do after `now` (its next tick plus its jitter offset);
/// TimePoint::max() when never (paused, past its end, or its limit reached). A buffered tick is
/// polled at every wake-up (at most max_wait apart).
TimePoint next_wake(const ScheduleEntry& e, TimePoint now);

}  // namespace streamq::detail
