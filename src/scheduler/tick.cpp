// SPDX-License-Identifier: MIT
#include "scheduler/tick.hpp"

#include <algorithm>
#include <vector>

#include "log.hpp"
#include "scheduler/cron.hpp"
#include "scheduler/jitter.hpp"
#include "streamq/errors.hpp"
#include "util/durations.hpp"
#include "wire/codec.hpp"

namespace streamq::detail {
namespace {

using std::chrono::milliseconds;

/// Most ticks one catch-up (MissedTicks::all_within) enqueues: the newest of the window.
constexpr std::size_t kMaxCatchUp = 1000;

void count(std::atomic<std::uint64_t>& counter) noexcept { counter.fetch_add(1, std::memory_order_relaxed); }

CatchUp catch_up_of(const RunningDefinition& d, const SchedulerOptions& options) {
  return d.def.options.catch_up.value_or(CatchUp{options.missed, {}});
}

/// When tick `tick`'s task is due: the tick plus its jitter offset.
TimePoint fire_time(const Definition& def, TimePoint tick) {
  return tick + jitter_offset(def.name, tick, def.options.jitter);
}

bool within_bounds(const ScheduledTaskOptions& o, TimePoint tick) {
  return (!o.start || tick >= *o.start) && (!o.end || tick <= *o.end);
}

/// The newest tick of `def` that is due at `now` (its fire time passed) and within its start
/// and end; TimePoint::min() when none. (A tick's offset is below the jitter, which should be
/// below the interval: a few steps back find it.)
TimePoint latest_due(const Definition& def, TimePoint now) {
  const ScheduledTaskOptions& o = def.options;
  TimePoint t = def.schedule.latest_at_or_before(o.end ? std::min(now, *o.end) : now);
  for (int step = 0; step < 3 && t != TimePoint::min() && fire_time(def, t) > now; ++step) {
    t = def.schedule.latest_at_or_before(t - milliseconds(1));
  }
  if (t == TimePoint::min() || fire_time(def, t) > now || !within_bounds(o, t)) return TimePoint::min();
  return t;
}

/// The ticks of `e`'s current definition to hand to the script at `now`, oldest first: the
/// newest due one; with MissedTicks::all_within, every one of the window not known handled.
std::vector<TimePoint> due_ticks(const ScheduleEntry& e, TimePoint now, const CatchUp& catch_up) {
  const Definition& def = e.current.def;
  TimePoint after = std::max(e.since, e.floor);  // only ticks after it
  if (e.handled) after = std::max(after, *e.handled);
  const TimePoint latest = latest_due(def, now);
  if (latest == TimePoint::min() || latest <= after) return {};
  if (catch_up.policy != MissedTicks::all_within) return {latest};
  // Ticks at or before the record's are taken: not asked again after a restart.
  if (e.recorded) after = std::max(after, *e.recorded);
  const TimePoint oldest = now - catch_up.window;  // only ticks newer than it
  std::vector<TimePoint> ticks;
  for (TimePoint t = latest; t != TimePoint::min() && t > after && t > oldest &&
                             within_bounds(def.options, t) && ticks.size() < kMaxCatchUp;
       t = def.schedule.latest_at_or_before(t - milliseconds(1))) {
    ticks.push_back(t);
  }
  std::reverse(ticks.begin(), ticks.end());
  return ticks;
}

void note_enqueued(ScheduleEntry& e, const RunningDefinition& d, const TickReply& r) {
  if (d.def.options.limit && r.enqueued >= *d.def.options.limit) e.exhausted = true;
}

/// Hands tick `due` of definition `d` to the script (`late_through`: the newest late tick of
/// the batch it belongs to). Counts and logs what the script did; returns its reply code.
std::int64_t handle_tick(ScheduleEntry& e, const RunningDefinition& d, TimePoint due, TimePoint now,
                         TimePoint late_through, ScriptRunner& scripts, const SchedulerOptions& options,
                         TickCounters& counters) {
  const Definition& def = d.def;
  const milliseconds lateness = std::chrono::duration_cast<milliseconds>(now - fire_time(def, due));
  const bool late = lateness > options.misfire_grace;
  const MissedTicks missed = catch_up_of(d, options).policy;
  const TickReply r = call_tick_script(scripts, e.keys, e.key, d, options.queue,
                                       {.mode = TickMode::tick,
                                        .tick = due,
                                        .now = now,
                                        .late = late,
                                        .missed = missed,
                                        .late_through = late_through});

  const std::string task_id = tick_task_id(def.name, due);
  const std::string what =
      "schedule \"" + def.name + "\" (" + def.schedule.description() + "): tick " + format_tick(due);
  const std::string late_by = std::to_string(lateness.count()) + " ms late";
  switch (r.code) {
    case tick_code::enqueued:
      count(counters.enqueued);
      note_enqueued(e, d, r);
      if (late) {
        log(LogLevel::info, what + " was missed (" + late_by + "); enqueued it as task " + task_id);
      } else if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug, what + ": enqueued task " + task_id);
      }
      break;
    case tick_code::taken:
      count(counters.taken);
      e.buffered = r.buffered;
      if (log_enabled(LogLevel::debug))
        log(LogLevel::debug, what + ": already handled (recorded tick " + r.detail + ")");
      break;
    case tick_code::skipped:
      count(counters.skipped);
      if (r.detail == "overlap") {
        log(LogLevel::info,
            what + ": the task of the previous tick has not ended; recorded as skipped (overlap)");
      } else {
        log(LogLevel::info,
            what + " was missed (" + late_by + "); recorded without enqueuing (" +
                (r.detail == "missed" ? "missed = MissedTicks::skip" : "first start of this schedule") + ")");
      }
      break;
    case tick_code::refused:
      count(counters.refused);
      log(LogLevel::error, what + ": queue full: " + e.keys.stream + " holds " + r.detail +
                               " entries (max_len " + std::to_string(options.queue.max_len) + "); task " +
                               task_id + " was not enqueued, and the tick is recorded as refused");
      break;
    case tick_code::buffered:
      e.buffered = due;
      log(LogLevel::info,
          what + ": the task of the previous tick has not ended; buffered (Overlap::buffer_one)");
      break;
    case tick_code::limit:
      e.exhausted = true;
      log(LogLevel::info, what + ": not enqueued: the schedule's limit of " +
                              std::to_string(*def.options.limit) + " ticks is reached");
      break;
    case tick_code::stale:
    case tick_code::paused:
      if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug,
            what + (r.code == tick_code::stale ? ": the stored definition changed; re-reading it"
                                               : ": paused; not enqueued"));
      }
      break;
    default: throw Error("schedule_tick returned " + std::to_string(r.code));
  }
  return r.code;
}

/// Asks the script to enqueue the buffered tick (it does once the previous task has ended).
TickHandled release_buffered(ScheduleEntry& e, TimePoint now, ScriptRunner& scripts,
                             const SchedulerOptions& options, TickCounters& counters) {
  const Definition& def = e.current.def;
  const TimePoint tick = *e.buffered;
  const TickReply r = call_tick_script(scripts, e.keys, e.key, e.current, options.queue,
                                       {.mode = TickMode::release, .tick = tick, .now = now});
  const std::string what = "schedule \"" + def.name + "\": buffered tick " + format_tick(tick);
  switch (r.code) {
    case tick_code::waiting: return TickHandled::done;  // the previous task still runs
    case tick_code::stale: return TickHandled::stale;
    case tick_code::paused: return TickHandled::done;
    case tick_code::enqueued:
      count(counters.enqueued);
      note_enqueued(e, e.current, r);
      log(LogLevel::info, what + ": the previous task ended; enqueued task " + tick_task_id(def.name, tick));
      break;
    case tick_code::refused:
      count(counters.refused);
      log(LogLevel::error, what + ": queue full (" + r.detail + " entries); not enqueued");
      break;
    case tick_code::limit: e.exhausted = true; break;
    case tick_code::taken: break;  // released by another instance
    default: throw Error("schedule_tick (release) returned " + std::to_string(r.code));
  }
  e.buffered.reset();
  return TickHandled::done;
}

}  // namespace

TickHandled handle_ticks(ScheduleEntry& e, TimePoint now, ScriptRunner& scripts,
                         const SchedulerOptions& options, TickCounters& counters) {
  if (e.previous) {
    // The switch this instance saw: the previous definition's last tick up to it, once; the
    // definition is kept until the clock has passed the switch.
    // Its bounds and jitter hold as for any of its ticks.
    const Definition& old = e.previous->def;
    const TimePoint due = old.schedule.latest_at_or_before(std::min(now, e.since));
    const bool counts =
        due != TimePoint::min() && within_bounds(old.options, due) && (!e.handled || due > *e.handled);
    if (counts && fire_time(old, due) <= now) {
      const std::int64_t code = handle_tick(e, *e.previous, due, now, due, scripts, options, counters);
      if (code == tick_code::stale) return TickHandled::stale;
      e.handled = due;
    }
    if (now >= e.since && (!counts || fire_time(old, due) <= now)) e.previous.reset();
  }
  if (e.paused) return TickHandled::done;
  if (e.buffered && release_buffered(e, now, scripts, options, counters) == TickHandled::stale) {
    return TickHandled::stale;
  }
  if (e.exhausted) return TickHandled::done;
  const std::vector<TimePoint> ticks = due_ticks(e, now, catch_up_of(e.current, options));
  TimePoint late_through = TimePoint::min();
  for (const TimePoint t : ticks) {
    if (now - fire_time(e.current.def, t) > options.misfire_grace) late_through = t;
  }
  for (const TimePoint due : ticks) {
    const std::int64_t code = handle_tick(e, e.current, due, now, late_through, scripts, options, counters);
    if (code == tick_code::stale) return TickHandled::stale;
    e.handled = due;
    if (code == tick_code::limit) break;
  }
  return TickHandled::done;
}

namespace {

/// When the current definition next has a tick due (the tick plus its jitter offset);
/// TimePoint::max() when never (paused, past its end, or its limit reached).
TimePoint next_fire(const ScheduleEntry& e, TimePoint now) {
  if (e.paused || e.exhausted) return TimePoint::max();
  const Definition& def = e.current.def;
  const ScheduledTaskOptions& o = def.options;
  const TimePoint after = std::max(e.since, e.floor);
  // The newest tick may have passed while its jitter offset has not.
  const TimePoint last = def.schedule.latest_at_or_before(now);
  if (last != TimePoint::min() && last > after && (!e.handled || last > *e.handled) &&
      within_bounds(o, last) && fire_time(def, last) > now) {
    return fire_time(def, last);
  }
  TimePoint from = std::max(now, after);
  if (o.start && *o.start > from) from = *o.start - milliseconds(1);
  const TimePoint next = def.schedule.next_after(from);
  if (next == TimePoint::max() || (o.end && next > *o.end)) return TimePoint::max();
  return fire_time(def, next);
}

}  // namespace

TimePoint next_wake(const ScheduleEntry& e, TimePoint now) {
  // A previous definition is kept until the clock has passed the switch.
  TimePoint previous = TimePoint::max();
  if (e.previous) {
    const Definition& old = e.previous->def;
    const TimePoint due = old.schedule.latest_at_or_before(std::min(now, e.since));
    if (due != TimePoint::min() && fire_time(old, due) > now) previous = fire_time(old, due);
    previous = std::min(previous, old.schedule.next_after(now));
  }
  return std::min(previous, next_fire(e, now));
}

}  // namespace streamq::detail
