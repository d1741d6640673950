// SPDX-License-Identifier: MIT
#include "scheduler/tick.hpp"

#include "log.hpp"
#include "scheduler/cron.hpp"
#include "streamq/errors.hpp"
#include "util/durations.hpp"
#include "wire/codec.hpp"

namespace streamq::detail {
namespace {

using std::chrono::milliseconds;

/// Replies of the schedule_tick script (its header).
constexpr std::int64_t tick_taken = 0;
constexpr std::int64_t tick_enqueued = 1;
constexpr std::int64_t tick_skipped = 2;
constexpr std::int64_t tick_refused = 3;
constexpr std::int64_t tick_stale = 4;
constexpr std::int64_t tick_paused = 5;

void count(std::atomic<std::uint64_t>& counter) noexcept { counter.fetch_add(1, std::memory_order_relaxed); }

const MissedTicks& missed_policy(const RunningDefinition& d, const SchedulerOptions& options) {
  return d.def.options.catch_up ? d.def.options.catch_up->policy : options.missed;
}

/// Hands tick `due` of definition `d` to the script. Returns the script's code.
std::int64_t handle_tick(ScheduleEntry& e, const RunningDefinition& d, TimePoint due, TimePoint now,
                         ScriptRunner& scripts, const SchedulerOptions& options, TickCounters& counters) {
  const Definition& def = d.def;
  const milliseconds lateness = std::chrono::duration_cast<milliseconds>(now - due);
  const bool late = lateness > options.misfire_grace;
  const MissedTicks missed = missed_policy(d, options);
  const std::string tick = format_tick(due);
  const std::string task_id = def.name + "@" + tick;
  const std::string created_at = format_timestamp(now);
  const std::string max_len = std::to_string(options.queue.max_len);
  const NewTask task{task_id,    def.task_type, def.payload,
                     created_at, d.max_retries, &def.options.extra_fields};

  Argv argv = scripts.begin(ScriptId::schedule_tick, 5);
  argv.add(e.keys.stream).add(e.key).add(e.keys.high).add(e.keys.low).add(e.keys.delayed);
  argv.add(unix_ms(due)).add(late ? "1" : "0");
  argv.add(missed == MissedTicks::skip ? "skip" : "enqueue_once");
  argv.add(options.queue.overflow == Overflow::reject ? "reject" : "trim").add(max_len);
  argv.add(task_id).add(d.version);
  append_new_task(argv, task);
  const Reply reply = scripts.call(ScriptId::schedule_tick, argv);
  const ReplyView v = reply.view().check();
  const std::int64_t code = v[0].integer();

  const std::string what = "schedule \"" + def.name + "\" (" + def.schedule.description() + "): tick " + tick;
  const std::string late_by = std::to_string(lateness.count()) + " ms late";
  switch (code) {
    case tick_enqueued:
      count(counters.enqueued);
      if (late) {
        log(LogLevel::info, what + " was missed (" + late_by + "); enqueued it once as task " + task_id);
      } else if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug, what + ": enqueued task " + task_id);
      }
      break;
    case tick_taken:
      count(counters.taken);
      if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug, what + ": already handled (recorded tick " + std::string(v[1].str()) + ")");
      }
      break;
    case tick_skipped:
      count(counters.skipped);
      log(LogLevel::info,
          what + " was missed (" + late_by + "); recorded without enqueuing (" +
              (missed == MissedTicks::skip ? "missed = MissedTicks::skip" : "first start of this schedule") +
              ")");
      break;
    case tick_refused:
      count(counters.refused);
      log(LogLevel::error, what + ": queue full: " + e.keys.stream + " holds " +
                               std::to_string(v[1].integer()) + " entries (max_len " + max_len + "); task " +
                               task_id + " was not enqueued, and the tick is recorded as refused");
      break;
    case tick_stale:
    case tick_paused:
      if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug, what + (code == tick_stale ? ": the stored definition changed; re-reading it"
                                                        : ": paused; not enqueued"));
      }
      break;
    default: throw Error("schedule_tick returned " + std::to_string(code));
  }
  return code;
}

}  // namespace

TickHandled handle_ticks(ScheduleEntry& e, TimePoint now, ScriptRunner& scripts,
                         const SchedulerOptions& options, TickCounters& counters) {
  if (e.previous) {
    // The switch this instance saw: the previous definition's last tick up to it, once; the
    // definition is kept until the clock has passed the switch.
    const TimePoint due = e.previous->def.schedule.latest_at_or_before(std::min(now, e.since));
    if (due != TimePoint::min() && (!e.handled || due > *e.handled)) {
      const std::int64_t code = handle_tick(e, *e.previous, due, now, scripts, options, counters);
      if (code == tick_stale) return TickHandled::stale;
      e.handled = due;
    }
    if (now >= e.since) e.previous.reset();
  }
  if (e.paused) return TickHandled::done;
  const TimePoint due = e.current.def.schedule.latest_at_or_before(now);
  if (due == TimePoint::min() || (e.handled && due <= *e.handled) || due <= std::max(e.since, e.floor)) {
    return TickHandled::done;
  }
  const std::int64_t code = handle_tick(e, e.current, due, now, scripts, options, counters);
  if (code == tick_stale) return TickHandled::stale;
  e.handled = due;
  return TickHandled::done;
}

TimePoint next_wake(const ScheduleEntry& e, TimePoint now) {
  TimePoint next = TimePoint::max();
  if (e.previous) next = std::min(next, e.previous->def.schedule.next_after(now));
  if (!e.paused) next = std::min(next, e.current.def.schedule.next_after(std::max({now, e.since, e.floor})));
  return next;
}

}  // namespace streamq::detail
