// SPDX-License-Identifier: MIT
// Schedules as data: the schedules of a queue, stored in Redis, that an operator (or a
// program) adds, changes, pauses and removes at runtime; every running Scheduler of the queue
// runs them and picks up a change within a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamq/common.hpp"
#include "streamq/export.hpp"
#include "streamq/scheduler.hpp"

namespace streamq {

/// One stored schedule, as Schedules::list and Schedules::get read it.
struct STREAMQ_EXPORT ScheduleInfo {
  using TimePoint = std::chrono::system_clock::time_point;

  std::string name;
  /// Schedule::description(): `0 9 * * mon-fri Europe/Berlin`, `every 30000ms`.
  std::string schedule;
  std::string task_type;
  std::string payload;
  ScheduledTaskOptions options;
  /// Given to a Scheduler in code (Scheduler::add, upserted at its start) rather than through
  /// Schedules::upsert (an operator, `streamq schedules upsert`).
  bool from_code = false;
  bool paused = false;
  /// The note given to pause() (why, by whom); empty when running.
  std::string note;
  /// Increases with every change of the definition (an upsert that changes it, a remove); not
  /// with pause() or resume() (the tick script tells definitions apart by it).
  std::int64_t version = 0;
  /// When the definition last changed; after a change (not a first upsert) its ticks are those
  /// after this instant.
  TimePoint changed_at{};
  /// The next ticks after now (at most the count asked for; none while paused, after `end`,
  /// or once `limit` ticks were enqueued).
  std::vector<TimePoint> next_ticks;
  /// The newest tick handled, and what happened to it: `enqueued`, `skipped` (missed, or an
  /// overlap), `refused` (queue full), `buffered` (Overlap::buffer_one). Unset: none yet.
  std::optional<TimePoint> last_tick;
  std::string last_outcome;
  /// The id of the last tick's task (`<name>@<tick>`).
  std::string last_task_id;
  /// Ticks enqueued so far (what `limit` counts).
  std::int64_t enqueued = 0;

  /// One JSON object (what `streamq schedules --json` and the dashboard print).
  std::string to_json() const;
};

/// What upsert() did.
enum class UpsertOutcome {
  created,    ///< no such schedule before
  changed,    ///< its definition changed: running Schedulers switch within a second
  unchanged,  ///< the same definition was stored already (nothing written)
};

/// What backfill() did.
struct STREAMQ_EXPORT BackfillResult {
  /// Tasks enqueued, oldest tick first (their ids, `<name>@<tick>`).
  std::vector<std::string> enqueued;
  /// Ticks of the range that had been enqueued already (by the schedule or a backfill).
  std::int64_t already = 0;
};

/// The stored schedules of one queue (`<stream>:schedules` lists them; each one's definition
/// and record is `<stream>:sched:<name>`, in the partition its name chooses). A Scheduler of
/// the queue runs every stored schedule, whether or not it was add()ed to it.
///
/// @code
///   streamq::Schedules schedules({.connection = {.url = "redis://127.0.0.1:6379"}, .stream = "task_queue"});
///   schedules.upsert("weekday-report", streamq::Schedule::cron("0 9 * * mon-fri", "Europe/Berlin"),
///                    "generate_pdf", {{"report_type", "sales"}});
///   schedules.pause("weekday-report", "holidays until Jan 7 (ops)");
///   for (const streamq::ScheduleInfo& s : schedules.list()) {
///     if (!s.paused) { /* s.next_ticks, s.last_outcome */ }
///   }
/// @endcode
///
/// Thread safety: one connection; use an instance from one thread at a time.
class STREAMQ_EXPORT Schedules {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  /// The queue (connection, stream, partitions; max_len and defaults are the Schedulers'). `clock`:
  /// the current time for `changed_at` and next_ticks; empty = the server's (`TIME`).
  /// @throws ConfigError for bad options. Does not connect.
  explicit Schedules(QueueOptions queue = {}, std::function<TimePoint()> clock = {});
  ~Schedules();
  Schedules(Schedules&&) noexcept;
  Schedules& operator=(Schedules&&) noexcept;
  Schedules(const Schedules&) = delete;
  Schedules& operator=(const Schedules&) = delete;

  /// Stores the schedule `name` (adds it, or replaces its definition; a paused schedule stays
  /// paused). The new definition's ticks are those after now; the old one's ticks up to now are
  /// still handled once (none twice, none lost at the switch).
  /// @throws ConfigError / PayloadError as Scheduler::add; ConnectionError; ReplyError.
  UpsertOutcome upsert(const std::string& name, const Schedule& schedule, const std::string& task_type,
                       const Payload& payload, const ScheduledTaskOptions& options = {});
  /// Removes it: no more ticks. Its record (the last tick) stays, so adding it again does not
  /// run a tick twice. False when there was none.
  bool remove(const std::string& name);
  /// No ticks until resume(); `note` says why (shown in the list). False when there is no such schedule.
  bool pause(const std::string& name, const std::string& note = {});
  /// Ticks again, from now on (ticks missed while paused are not caught up). False when none.
  bool resume(const std::string& name);
  /// Every stored schedule, sorted by name, each with its next `next_ticks` ticks.
  std::vector<ScheduleInfo> list(std::size_t next_ticks = 3);
  /// One schedule; nullopt when there is none.
  std::optional<ScheduleInfo> get(const std::string& name, std::size_t next_ticks = 3);
  /// Enqueues the ticks of `name` in [from, to] (at most 1000; within its start and end) that
  /// were not enqueued before, oldest first, each once (a second backfill of the same range
  /// enqueues nothing), with the ids `<name>@<tick>`. What was enqueued is the record's ticks
  /// set (`<record>:ticks`, the newest 10,000 ticks): one `EVALSHA` of the tick script per tick
  /// checks it (`ZSCORE`), adds the task (`XADD`) and the tick (`ZADD`), atomically. Backfilled
  /// tasks do not move the record's tick, do not count towards `limit` nor the overlap policy,
  /// and are enqueued while the schedule is paused too; the queue's overflow gate applies.
  /// @throws ConfigError for no such schedule, from > to, or a range of more than 1000 ticks;
  ///   QueueFullError when the queue is full (batch_ids(): the ids enqueued before); Error when
  ///   the definition changed meanwhile (the ticks enqueued stay: run it again); ConnectionError.
  BackfillResult backfill(const std::string& name, TimePoint from, TimePoint to);

 private:
  struct STREAMQ_NO_EXPORT Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamq
