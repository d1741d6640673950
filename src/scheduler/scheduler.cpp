// SPDX-License-Identifier: MIT
// The Scheduler: one thread and one connection. Each wake-up reads the clock, hands each
// schedule's most recent tick to the schedule_tick script unless this instance already did,
// and waits on a condition variable until the next tick (at most max_wait), so stop() is
// prompt. Which instance enqueues a tick is decided in Redis, never here.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include "log.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "scheduler/cron.hpp"
#include "streamq/errors.hpp"
#include "streamq/scheduler.hpp"
#include "util/durations.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::system_clock::time_point;

/// Replies of the schedule_tick script (its header).
constexpr std::int64_t tick_taken = 0;
constexpr std::int64_t tick_enqueued = 1;
constexpr std::int64_t tick_skipped = 2;
constexpr std::int64_t tick_refused = 3;

SchedulerOptions validated(SchedulerOptions o) {
  const QueueOptions& q = o.queue;
  if (q.stream.empty()) throw ConfigError("queue.stream must not be empty");
  if (q.max_len <= 0) throw ConfigError("queue.max_len must be > 0");
  detail::check_partitions(q.partitions, q.stream);
  if (q.overflow != Overflow::reject && q.overflow != Overflow::trim_oldest) {
    throw ConfigError("queue.overflow must be Overflow::reject or Overflow::trim_oldest");
  }
  if (o.missed != MissedTicks::enqueue_once && o.missed != MissedTicks::skip) {
    throw ConfigError("missed must be MissedTicks::enqueue_once or MissedTicks::skip");
  }
  detail::check_duration(o.misfire_grace, milliseconds(0), "misfire_grace");
  detail::check_duration(o.max_wait, milliseconds(1), "max_wait");
  if (q.default_max_retries < 0) throw ConfigError("queue.default_max_retries must be >= 0");
  if (q.max_payload_bytes == 0) throw ConfigError("queue.max_payload_bytes must be > 0");
  if (q.max_payload_depth < 1) throw ConfigError("queue.max_payload_depth must be >= 1");
  return o;
}

/// The server's clock: TIME answers [seconds, microseconds].
TimePoint server_time(detail::Connection& conn) {
  const detail::Reply r = conn.command({"TIME"});
  const detail::ReplyView v = r.view().check();
  return TimePoint(std::chrono::seconds(v[0].as_int()) + std::chrono::microseconds(v[1].as_int()));
}

std::int64_t epoch_ms(TimePoint t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

struct Scheduler::Impl {
  /// One add()ed schedule.
  struct Entry {
    std::string name;
    Schedule schedule;
    std::string task_type;
    std::string payload;
    int max_retries = 3;
    std::vector<std::pair<std::string, std::string>> extra_fields;
    detail::QueueKeys keys;            // of the partition its ticks go to
    std::string key;                   // <stream>:sched:<name>, in that partition
    std::optional<TimePoint> handled;  // newest tick this instance got an answer for
  };

  explicit Impl(SchedulerOptions o)
      : options(validated(std::move(o))),
        connection(detail::make_connection_config(
            options.queue.connection, "scheduler",
            detail::partition_stream(options.queue.stream, options.queue.partitions, 0))),
        max_len_text(std::to_string(options.queue.max_len)) {}

  void main();
  /// Hands `e`'s most recent tick at `now` to the script, unless this instance already did.
  /// Throws ConnectionError / ReplyError.
  void handle(Entry& e, TimePoint now, detail::ScriptRunner& scripts);
  void count(std::atomic<std::uint64_t>& counter) noexcept {
    counter.fetch_add(1, std::memory_order_relaxed);
  }

  SchedulerOptions options;
  detail::ConnectionConfig connection;
  std::string max_len_text;
  std::vector<Entry> entries;

  std::mutex mutex;
  std::condition_variable_any cv;
  std::stop_source stop_source;
  std::atomic<bool> started{false};
  std::jthread thread;

  std::atomic<std::uint64_t> enqueued{0};
  std::atomic<std::uint64_t> taken{0};
  std::atomic<std::uint64_t> skipped{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> reconnects{0};
};

void Scheduler::Impl::handle(Entry& e, TimePoint now, detail::ScriptRunner& scripts) {
  const TimePoint due = e.schedule.latest_at_or_before(now);
  if (due == TimePoint::min() || (e.handled && due <= *e.handled)) return;
  const milliseconds lateness = std::chrono::duration_cast<milliseconds>(now - due);
  const bool late = lateness > options.misfire_grace;
  const std::string tick = detail::format_tick(due);
  const std::string task_id = e.name + "@" + tick;
  const std::string created_at = detail::format_timestamp(now);
  const detail::NewTask task{task_id, e.task_type, e.payload, created_at, e.max_retries, &e.extra_fields};

  detail::Argv argv = scripts.begin(detail::ScriptId::schedule_tick, 5);
  argv.add(e.keys.stream).add(e.key).add(e.keys.high).add(e.keys.low).add(e.keys.delayed);
  argv.add(epoch_ms(due)).add(late ? "1" : "0");
  argv.add(options.missed == MissedTicks::skip ? "skip" : "enqueue_once");
  argv.add(options.queue.overflow == Overflow::reject ? "reject" : "trim").add(max_len_text);
  argv.add(task_id);
  detail::append_new_task(argv, task);
  const detail::Reply reply = scripts.call(detail::ScriptId::schedule_tick, argv);
  const detail::ReplyView v = reply.view().check();
  const std::int64_t code = v[0].integer();
  e.handled = due;

  const std::string what = "schedule \"" + e.name + "\" (" + e.schedule.description() + "): tick " + tick;
  const std::string late_by = std::to_string(lateness.count()) + " ms late";
  switch (code) {
    case tick_enqueued:
      count(enqueued);
      if (late) {
        detail::log(LogLevel::info,
                    what + " was missed (" + late_by + "); enqueued it once as task " + task_id);
      } else if (detail::log_enabled(LogLevel::debug)) {
        detail::log(LogLevel::debug, what + ": enqueued task " + task_id);
      }
      break;
    case tick_taken:
      count(taken);
      if (detail::log_enabled(LogLevel::debug)) {
        detail::log(LogLevel::debug,
                    what + ": already handled (recorded tick " + std::string(v[1].str()) + ")");
      }
      break;
    case tick_skipped:
      count(skipped);
      detail::log(LogLevel::info, what + " was missed (" + late_by + "); recorded without enqueuing (" +
                                      (options.missed == MissedTicks::skip ? "missed = MissedTicks::skip"
                                                                           : "first start of this schedule") +
                                      ")");
      break;
    case tick_refused:
      count(refused);
      detail::log(LogLevel::error, what + ": queue full: " + e.keys.stream + " holds " +
                                       std::to_string(v[1].integer()) + " entries (max_len " + max_len_text +
                                       "); task " + task_id +
                                       " was not enqueued, and the tick is recorded as refused");
      break;
    default: throw Error("schedule_tick returned " + std::to_string(code));
  }
}

void Scheduler::Impl::main() {
  detail::block_sigpipe_for_this_thread();  // library code only runs on this thread
  detail::Connection conn(connection);
  detail::ScriptRunner scripts(conn);
  detail::Backoff error_backoff(connection.backoff_base, connection.backoff_max);
  const std::stop_token stop = stop_source.get_token();
  while (!stop.stop_requested()) {
    milliseconds wait = options.max_wait;
    try {
      if (!conn.connected()) {
        conn.connect();
        if (conn.generation() > 1) count(reconnects);
      }
      const TimePoint now = options.clock ? options.clock() : server_time(conn);
      TimePoint next = TimePoint::max();
      bool failed = false;
      for (Entry& e : entries) {
        try {
          handle(e, now, scripts);
        } catch (const ConnectionError&) {
          throw;
        } catch (const std::exception& ex) {
          // This schedule is retried after a backoff; the others go on.
          count(errors);
          failed = true;
          detail::log(detail::retry_level(ex), "schedule \"" + e.name + "\": " + ex.what() + "; retrying");
        }
        next = std::min(next, e.schedule.next_after(now));
      }
      if (failed) {
        error_backoff.fail();
        wait = std::min(wait, error_backoff.delay());
      } else {
        error_backoff.reset();
      }
      if (next != TimePoint::max()) {
        // Rounded up: waking just before the tick would only wait again.
        wait = std::min(wait, std::max(milliseconds(1), std::chrono::ceil<milliseconds>(next - now)));
      }
    } catch (const ConnectionError& ex) {
      count(errors);
      wait = conn.backoff_delay();
      detail::log(LogLevel::warning, std::string("scheduler: ") + ex.what() + "; reconnecting in " +
                                         std::to_string(wait.count()) + " ms");
    } catch (const std::exception& ex) {  // the session set-up was refused, or TIME failed
      count(errors);
      error_backoff.fail();
      wait = error_backoff.delay();
      detail::log(detail::retry_level(ex), std::string("scheduler: ") + ex.what() + "; retrying");
    }
    std::unique_lock lock(mutex);
    cv.wait_for(lock, stop, wait, [] { return false; });
  }
}

Scheduler::Scheduler(SchedulerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Scheduler::~Scheduler() {
  if (impl_) stop();
}

Scheduler::Scheduler(Scheduler&&) noexcept = default;
Scheduler& Scheduler::operator=(Scheduler&& other) noexcept {
  if (this != &other) {
    if (impl_) stop();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void Scheduler::add(std::string name, Schedule schedule, std::string task_type, const Payload& payload,
                    ScheduledTaskOptions options) {
  Impl& im = *impl_;
  if (im.started.load()) throw ConfigError("add() must be called before run() or start()");
  if (name.empty()) throw ConfigError("schedule name must not be empty");
  for (const Impl::Entry& e : im.entries) {
    if (e.name == name) throw ConfigError("schedule name \"" + name + "\" is already taken");
  }
  if (task_type.empty()) throw ConfigError("task_type of schedule \"" + name + "\" must not be empty");
  if (options.max_retries && *options.max_retries < 0) {
    throw ConfigError("max_retries of schedule \"" + name + "\" must be >= 0");
  }
  if (options.extra_fields.size() + std::size(detail::task_fields) > detail::kMaxFields) {
    throw ConfigError("schedule \"" + name + "\" has more than " +
                      std::to_string(detail::kMaxFields - std::size(detail::task_fields)) + " extra fields");
  }
  for (const auto& [field, value] : options.extra_fields) {
    if (field.empty() || detail::is_reserved_field(field)) {
      throw ConfigError("extra field name \"" + field + "\" of schedule \"" + name +
                        "\" is empty or reserved");
    }
  }
  if (auto problem = detail::payload_problem(payload.text(), im.options.queue.max_payload_bytes,
                                             im.options.queue.max_payload_depth)) {
    throw PayloadError("payload of schedule \"" + name + "\": " + *problem);
  }
  // A schedule's ticks all go to one partition, chosen by its name: one record, one order.
  const int n = im.options.queue.partitions;
  const int partition = n == 1 ? 0 : static_cast<int>(detail::crc16(name) % static_cast<unsigned>(n));
  detail::QueueKeys keys =
      detail::queue_keys(detail::partition_stream(im.options.queue.stream, n, partition));
  std::string key = detail::schedule_key(keys.stream, name);
  im.entries.push_back(Impl::Entry{std::move(name), std::move(schedule), std::move(task_type), payload.text(),
                                   options.max_retries.value_or(im.options.queue.default_max_retries),
                                   std::move(options.extra_fields), std::move(keys), std::move(key),
                                   std::nullopt});
}

void Scheduler::run() {
  Impl& im = *impl_;
  if (im.entries.empty()) throw ConfigError("no schedule was added");
  if (im.started.exchange(true)) throw ConfigError("run() or start() was called before");
  im.main();
}

void Scheduler::start() {
  Impl& im = *impl_;
  if (im.entries.empty()) throw ConfigError("no schedule was added");
  if (im.started.exchange(true)) throw ConfigError("run() or start() was called before");
  Impl* p = &im;
  im.thread = std::jthread([p] { p->main(); });
}

void Scheduler::stop() {
  if (!impl_) return;  // moved from
  Impl& im = *impl_;
  im.stop_source.request_stop();
  {
    std::lock_guard lock(im.mutex);  // a waiter between its check and its wait still sees it
  }
  im.cv.notify_all();
  if (im.thread.joinable() && im.thread.get_id() != std::this_thread::get_id()) im.thread.join();
}

SchedulerMetrics Scheduler::metrics() const noexcept {
  const Impl& im = *impl_;
  constexpr auto r = std::memory_order_relaxed;
  return {im.enqueued.load(r), im.taken.load(r),  im.skipped.load(r),
          im.refused.load(r),  im.errors.load(r), im.reconnects.load(r)};
}

const SchedulerOptions& Scheduler::options() const noexcept { return impl_->options; }

}  // namespace streamq
