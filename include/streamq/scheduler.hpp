// SPDX-License-Identifier: MIT
// Periodic tasks: a Scheduler enqueues tasks on cron or interval schedules, each tick exactly
// once however many Scheduler instances run.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "streamq/common.hpp"
#include "streamq/export.hpp"
#include "streamq/producer.hpp"

namespace streamq {

/// When a schedule's tasks are due: a cron expression or a fixed interval. A value type.
///
/// @code
///   auto every_five_minutes = streamq::Schedule::cron("*/5 * * * *");
///   auto weekdays_at_nine_cet = streamq::Schedule::cron("0 9 * * mon-fri", std::chrono::hours(1));
///   auto weekdays_at_nine_in_berlin = streamq::Schedule::cron("0 9 * * mon-fri", "Europe/Berlin");
///   auto every_half_minute = streamq::Schedule::every(std::chrono::seconds(30));
/// @endcode
///
/// Thread safety: immutable once built; const calls from any thread.
class STREAMQ_EXPORT Schedule {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  /// A 5-field cron expression: minute (0-59), hour (0-23), day of month (1-31), month (1-12
  /// or jan-dec), day of week (0-7 or sun-sat; 0 and 7 are Sunday). Each field is `*` or a
  /// comma-separated list of values, ranges `a-b`, and steps `*/n`, `a-b/n`, `a/n` (= a to the
  /// field's maximum, every n). Names are case-insensitive. `@hourly`, `@daily` (`@midnight`),
  /// `@weekly`, `@monthly`, `@yearly` (`@annually`) stand for the usual expressions. When both
  /// day of month and day of week are restricted (neither starts with `*`), a day matches if
  /// either does (as in Vixie cron and cronie). Times are UTC shifted by `utc_offset` (a fixed
  /// offset, east positive: `std::chrono::hours(1)` evaluates the fields at UTC+01:00; no
  /// daylight-saving rules). @throws ConfigError naming the field, the 1-based position in
  /// `expression` and the reason, or saying that the expression matches no date at all.
  static Schedule cron(std::string_view expression,
                       std::chrono::minutes utc_offset = std::chrono::minutes(0));

  /// The cron expression (as above) read in the named time zone of the system's time-zone
  /// database (an IANA name: `Europe/Berlin`, `America/New_York`; Debian's tzdata, read through
  /// the date-tz library), following its daylight-saving changes. When the clock springs
  /// forward, a time it skips runs once, at the first instant after the skip (`30 2 * * *` on
  /// Berlin's spring-forward day runs at 03:00); when it falls back, a time it repeats runs
  /// once, at its first occurrence. An expression whose minute or hour field starts with `*`
  /// (`0 * * * *`, `*/15 * * * *`) follows elapsed time instead, as in Vixie cron: skipped
  /// times do not tick and repeated ones tick in both passes (hourly: 23 ticks on a 23-hour
  /// day, 25 on a 25-hour day). No instant ticks twice. The zone is looked up here, once.
  /// @throws ConfigError as above for the expression; naming `time_zone` when the database has
  ///   no such zone (or the system has no time-zone database).
  static Schedule cron(std::string_view expression, std::string_view time_zone);

  /// A tick every `interval` (whole milliseconds, at least 1 ms), aligned to the Unix epoch
  /// (every(30s) ticks at :00 and :30 of each minute), so every instance computes the same
  /// ticks. Intervals are absolute: no time zone or daylight-saving change moves them.
  /// @throws ConfigError when `interval` is below 1 ms.
  static Schedule every(std::chrono::milliseconds interval);

  /// Parses what description() prints: a cron expression with, as its last word, an optional
  /// time zone (an IANA name) or fixed offset (`UTC+01:00`, `UTC-05:30`), or `every <N>ms`.
  /// The form schedules are stored in Redis and typed at `streamq schedules upsert`.
  /// @throws ConfigError as cron() and every(), or naming what is not understood.
  static Schedule parse(std::string_view description);

  /// The first tick strictly after `t`; TimePoint::max() when there is none.
  TimePoint next_after(TimePoint t) const;
  /// The last tick at or before `t`; TimePoint::min() when there is none.
  TimePoint latest_at_or_before(TimePoint t) const;
  /// The expression as given (`*/5 * * * *`, with ` UTC+01:00` appended for an offset or
  /// ` Europe/Berlin` for a time zone), or `every 30000ms`.
  const std::string& description() const noexcept;

 private:
  struct STREAMQ_NO_EXPORT Rule;  // defined in the library
  explicit Schedule(std::shared_ptr<const Rule> rule) : rule_(std::move(rule)) {}
  std::shared_ptr<const Rule> rule_;
};

/// What happens to a tick that fell due while no Scheduler instance could enqueue it (every
/// instance down, or Redis unreachable) and is found more than `misfire_grace` late.
enum class MissedTicks {
  /// Enqueue the most recent missed tick once (older missed ticks of the same schedule are
  /// not enqueued). Default.
  enqueue_once,
  /// Record the most recent missed tick without enqueuing it.
  skip,
  /// Enqueue every missed tick of the last CatchUp::window, oldest first (each with its own
  /// id); older missed ticks are not enqueued. Per schedule only (ScheduledTaskOptions::catch_up).
  all_within,
};

/// A schedule's policy for missed ticks (see MissedTicks).
///
/// @code
///   streamq::ScheduledTaskOptions o{.catch_up = streamq::CatchUp::all_within(std::chrono::hours(6))};
/// @endcode
struct STREAMQ_EXPORT CatchUp {
  MissedTicks policy = MissedTicks::enqueue_once;
  /// With MissedTicks::all_within: how far back missed ticks are enqueued (> 0, at most 1000
  /// ticks). Ignored otherwise.
  std::chrono::milliseconds window{0};

  static CatchUp enqueue_once() { return {MissedTicks::enqueue_once, {}}; }
  static CatchUp skip() { return {MissedTicks::skip, {}}; }
  static CatchUp all_within(std::chrono::milliseconds window) { return {MissedTicks::all_within, window}; }
  friend bool operator==(const CatchUp&, const CatchUp&) = default;
};

/// What a tick does while the task of the schedule's previous tick has not ended (neither done,
/// dead nor cancelled). Anything but `allow` makes the schedule's tasks tracked (Retention).
enum class Overlap {
  /// Enqueue it anyway (default).
  allow,
  /// Record the tick as skipped, without enqueuing it.
  skip,
  /// Keep the newest such tick, and enqueue it once the previous task has ended; ticks that
  /// find one kept already are skipped.
  buffer_one,
};

/// Per-schedule task options and policies.
struct STREAMQ_EXPORT ScheduledTaskOptions {
  /// Retries allowed after the first attempt; unset = SchedulerOptions::queue.default_max_retries.
  std::optional<int> max_retries{};
  /// Extra fields written after the standard ones (as EnqueueOptions::extra_fields). Names
  /// must not collide with wire fields.
  std::vector<std::pair<std::string, std::string>> extra_fields{};
  /// The tasks' priority level.
  Priority priority = Priority::normal;
  /// Track the tasks (EnqueueOptions::retention). Unset: untracked, unless `overlap` is not
  /// Overlap::allow (then kept an hour once done, and as long as their dead letter).
  std::optional<Retention> retention{};
  /// No tick before `start` / after `end` (inclusive bounds). Unset: no bound.
  std::optional<std::chrono::system_clock::time_point> start{};
  std::optional<std::chrono::system_clock::time_point> end{};
  /// At most this many ticks are ever enqueued (counted in the schedule's record; > 0). Unset: no limit.
  std::optional<std::int64_t> limit{};
  /// Each tick's task is enqueued up to this long after the tick, by an offset derived from the
  /// schedule's name and the tick's time (the same on every instance). 0 = at the tick. Must be
  /// below the time between two ticks (ConfigError, looked for over the first 64 ticks of 2026).
  std::chrono::milliseconds jitter{0};
  /// While the previous tick's task runs: see Overlap.
  Overlap overlap = Overlap::allow;
  /// Missed ticks; unset = SchedulerOptions::missed.
  std::optional<CatchUp> catch_up{};
};

/// Scheduler configuration. Validated by the Scheduler constructor (ConfigError names the field).
struct STREAMQ_EXPORT SchedulerOptions {
  /// The queue the ticks are enqueued on. Each schedule's record is `<stream>:sched:<name>`
  /// (with partitions > 1, `<partition's stream>:sched:<name>`, beside the schedule's tasks:
  /// all the ticks of one schedule go to one partition, CRC16 of its name mod partitions).
  /// With Overflow::reject a tick that finds the queue's backlog (every priority's stream plus
  /// the delayed set, as the Producer counts it) at max_len or more is not enqueued: it is
  /// recorded as refused (no instance retries it), logged at error level and counted in
  /// SchedulerMetrics::refused. With Overflow::trim_oldest the task is added with
  /// `XADD MAXLEN ~ max_len`. default_max_retries applies unless a schedule says otherwise;
  /// max_payload_bytes and max_payload_depth bound what add() takes (PayloadError).
  QueueOptions queue{};
  /// What happens to a tick found more than misfire_grace late (see MissedTicks).
  MissedTicks missed = MissedTicks::enqueue_once;
  /// A tick handled at most this long after its time is on time and enqueued; a later one is
  /// missed and follows `missed`. On a schedule's first start (no record in Redis yet) a tick
  /// later than this is recorded and not enqueued, whatever `missed` says. Keep it well above
  /// max_wait plus a Redis round trip: an instance that starts just after a tick must see it
  /// as on time, or with MissedTicks::skip it could record the tick a running instance was
  /// about to enqueue. Must be >= 0.
  std::chrono::milliseconds misfire_grace{60000};
  /// The current time. Empty (default) = the Redis server's clock (`TIME`, read on every
  /// wake-up), so instances on hosts with skewed clocks agree on when a tick is due. Set it to
  /// drive a Scheduler from a clock of your own (tests: a fake clock); it is called on the
  /// Scheduler's thread and must be thread-safe.
  std::function<std::chrono::system_clock::time_point()> clock{};
  /// Longest wait between two clock reads. A wait normally ends at the next tick; this bounds
  /// how late a tick is noticed when the clock jumps (an injected clock). Must be > 0.
  std::chrono::milliseconds max_wait{1000};
};

/// Counters since construction. Each instance counts the ticks it handled itself.
struct STREAMQ_EXPORT SchedulerMetrics {
  /// Ticks this instance enqueued (on time or missed and then enqueued once).
  std::uint64_t enqueued = 0;
  /// Ticks another instance (or an earlier run) had already handled.
  std::uint64_t taken = 0;
  /// Ticks recorded without enqueuing: missed with MissedTicks::skip, found late on a
  /// schedule's first start, or skipped by an overlap policy (Overlap::skip, or buffer_one with
  /// a tick buffered already).
  std::uint64_t skipped = 0;
  /// Ticks not enqueued because the queue was full (Overflow::reject).
  std::uint64_t refused = 0;
  /// Failed attempts (connection lost, an error reply); each is logged and retried.
  std::uint64_t errors = 0;
  /// Connections established after a failure or a loss (the first connect is not counted).
  std::uint64_t reconnects = 0;
  /// Times the stored schedules were read (at start, after a reconnect, and after every
  /// change: an upsert, pause, resume or removal, or a tick refused as of an older definition).
  std::uint64_t reloads = 0;
};

/// Enqueues tasks on schedules. Any number of instances (in one process or many) may run the
/// same schedules on the same stream: each tick is enqueued exactly once, across instances and
/// restarts. A tick's task has the normal wire format, so a Consumer runs it, and the
/// deterministic id `<name>@<tick, ISO 8601 UTC>` (`nightly@2026-03-01T02:00:00Z`; with
/// milliseconds when the tick has them).
///
/// A Scheduler runs every schedule stored for its queue (see Schedules: added, changed, paused
/// and removed at runtime; it reads them again within max_wait of a change), and the schedules
/// given to add(), which it stores at start (marked as from code; again after a reconnect).
///
/// Each tick is one `EVALSHA` of a script that compares the tick with the schedule's record
/// (`<stream>:sched:<name>`: its definition's version, paused, the newest tick) and, only when
/// the tick is newer and of the definition in force at its time, checks the schedule's limit and
/// overlap policy (`HGET` of the previous task's record), the backlog (`XLEN` of each priority's
/// stream, `ZCARD` of the delayed set), adds the task (`XADD`; a tracked task's record and event
/// as the Producer writes them), records the tick (`HSET`, `HINCRBY`) and remembers it (`ZADD
/// <record>:ticks`), atomically. The policies are in docs/scheduling.md ("Policies"). With the
/// default clock each wake-up also sends `TIME`; every wake-up reads the stored schedules'
/// change counter (`GET`).
///
/// @code
///   streamq::Scheduler scheduler({.queue = {.connection = {.url = "redis://127.0.0.1:6379"},
///                                           .stream = "task_queue"}});
///   scheduler.add("nightly-report", streamq::Schedule::cron("0 2 * * *"), "generate_pdf",
///                 {{"report_type", "sales"}, {"period", "yesterday"}});
///   scheduler.add("heartbeat", streamq::Schedule::every(std::chrono::seconds(30)), "reindex", "{}");
///   scheduler.start();  // its own thread; or scheduler.run() to block this one
///   // ...
///   scheduler.stop();
/// @endcode
///
/// Thread safety: add() before run()/start(), from one thread; stop() and metrics() from any
/// thread. Movable (not while running), not copyable.
class STREAMQ_EXPORT Scheduler {
 public:
  /// Validates the options (ConfigError names the field). Does not connect.
  explicit Scheduler(SchedulerOptions options = {});
  /// Stops and joins the thread start() started.
  ~Scheduler();
  Scheduler(Scheduler&&) noexcept;
  Scheduler& operator=(Scheduler&&) noexcept;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Adds a schedule: at each tick of `schedule`, a task of `task_type` with `payload`.
  /// `name` identifies the schedule across instances and restarts (its record is
  /// `<stream>:sched:<name>`): give every instance the same names and schedules. It is stored
  /// (Schedules::upsert, marked as from code) when the Scheduler starts: a stored schedule of
  /// the same name gets this definition (a paused one stays paused).
  /// @throws ConfigError (empty or duplicate name, empty task type, negative max_retries, a
  ///   reserved extra field name, an option out of range, or called after run()/start());
  ///   PayloadError for a payload that is not JSON or is too large or deep.
  void add(std::string name, Schedule schedule, std::string task_type, const Payload& payload,
           ScheduledTaskOptions options = {});

  /// Runs on the calling thread until stop(): connects, then handles each schedule's ticks as
  /// they fall due. Connection failures and error replies are logged, counted in
  /// SchedulerMetrics::errors and retried with the connection's backoff; they never end it.
  /// On (re)start, the most recent tick of each schedule is handled at once: enqueued when on
  /// time or missed with MissedTicks::enqueue_once, otherwise recorded. With no schedule added
  /// and none stored it waits for stored ones.
  /// @throws ConfigError when run() or start() was called before.
  void run();
  /// As run(), on a thread of its own. Returns at once. @throws as run().
  void start();
  /// Asks run() (or start()'s thread) to return, promptly: a wait ends at once, a Redis call
  /// in progress first ends (at most the socket timeout). Joins start()'s thread unless
  /// called on it. Before run(), makes the next run() return at once. Thread-safe.
  void stop();

  /// Counters since construction. Thread-safe.
  SchedulerMetrics metrics() const noexcept;
  /// The validated options.
  const SchedulerOptions& options() const noexcept;

 private:
  struct STREAMQ_NO_EXPORT Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamq
