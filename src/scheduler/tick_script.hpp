// SPDX-License-Identifier: MIT
// One call of the schedule_tick script (src/lua/schedule_tick.lua): its arguments, built from
// a schedule and one of its ticks, and its reply. The Scheduler's ticks (tick.cpp) and
// Schedules::backfill both go through it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "redis/scripts.hpp"
#include "scheduler/definition.hpp"
#include "streamq/scheduler.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

/// The script's reply codes (its header).
namespace tick_code {
inline constexpr std::int64_t taken = 0;
inline constexpr std::int64_t enqueued = 1;
inline constexpr std::int64_t skipped = 2;
inline constexpr std::int64_t refused = 3;
inline constexpr std::int64_t stale = 4;
inline constexpr std::int64_t paused = 5;
inline constexpr std::int64_t limit = 6;
inline constexpr std::int64_t buffered = 7;
inline constexpr std::int64_t waiting = 8;
}  // namespace tick_code

/// What the call asks.
enum class TickMode {
  tick,      ///< a tick fell due
  release,   ///< the buffered tick (Overlap::buffer_one), if the previous task has ended
  backfill,  ///< a past tick, unless it was enqueued before (Schedules::backfill)
};

struct TickCall {
  TickMode mode = TickMode::tick;
  std::chrono::system_clock::time_point tick;
  std::chrono::system_clock::time_point now;  // the task's created_at
  bool late = false;                          // past the misfire grace
  MissedTicks missed = MissedTicks::enqueue_once;
  /// The newest late tick of the caller's batch of ticks (a first start records up to it).
  std::chrono::system_clock::time_point late_through{};
};

struct TickReply {
  std::int64_t code = tick_code::taken;
  /// The reply's second element as text: the entry id, the recorded tick, why it was skipped,
  /// the backlog (refused), the running task's id (waiting).
  std::string detail;
  /// tick_code::enqueued: the record's count of enqueued ticks, this one's included.
  std::int64_t enqueued = 0;
  /// tick_code::taken: the tick the record keeps buffered, if any.
  std::optional<std::chrono::system_clock::time_point> buffered;
};

/// `<name>@<tick, ISO 8601 UTC>`: a tick's task id.
std::string tick_task_id(std::string_view name, std::chrono::system_clock::time_point tick);

/// The retention field of a schedule's tasks: its own retention; else, for an overlap policy
/// (which must see when a task ended), an hour once done and as long as its dead letter; else
/// empty (untracked).
std::string tick_retention(const ScheduledTaskOptions& options);

/// Calls the script for `call` on the schedule `d` whose tasks go to `keys` (its partition's)
/// and whose record is `record`. Throws ConnectionError / ReplyError.
TickReply call_tick_script(ScriptRunner& scripts, const QueueKeys& keys, const std::string& record,
                           const RunningDefinition& d, const QueueOptions& queue, const TickCall& call);

}  // namespace streamq::detail
