// SPDX-License-Identifier: MIT
// The Scheduler: one thread and one connection. Each wake-up reads the clock, stores the
// schedules given in code (once per connection), re-reads the stored schedules when their
// change counter moved, hands each schedule's due tick to the schedule_tick script
// (tick.cpp) unless this instance already did, and waits on a condition variable until the
// next tick (at most max_wait), so stop() is prompt. Which instance enqueues a tick is decided
// in Redis, never here.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <thread>

#include "log.hpp"
#include "redis/connection.hpp"
#include "redis/connection_config.hpp"
#include "redis/scripts.hpp"
#include "scheduler/store.hpp"
#include "scheduler/tick.hpp"
#include "streamq/errors.hpp"
#include "streamq/scheduler.hpp"
#include "util/durations.hpp"
#include "wire/keys.hpp"

namespace streamq {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::system_clock::time_point;

SchedulerOptions validated(SchedulerOptions o) {
  const QueueOptions& q = o.queue;
  if (q.stream.empty()) throw ConfigError("queue.stream must not be empty");
  if (q.max_len <= 0) throw ConfigError("queue.max_len must be > 0");
  detail::check_partitions(q.partitions, q.stream);
  if (q.overflow != Overflow::reject && q.overflow != Overflow::trim_oldest) {
    throw ConfigError("queue.overflow must be Overflow::reject or Overflow::trim_oldest");
  }
  if (o.missed != MissedTicks::enqueue_once && o.missed != MissedTicks::skip) {
    throw ConfigError(
        "missed must be MissedTicks::enqueue_once or MissedTicks::skip (all_within is a schedule's "
        "ScheduledTaskOptions::catch_up, with its window)");
  }
  detail::check_duration(o.misfire_grace, milliseconds(0), "misfire_grace");
  detail::check_duration(o.max_wait, milliseconds(1), "max_wait");
  if (q.default_max_retries < 0) throw ConfigError("queue.default_max_retries must be >= 0");
  if (q.max_payload_bytes == 0) throw ConfigError("queue.max_payload_bytes must be > 0");
  if (q.max_payload_depth < 1) throw ConfigError("queue.max_payload_depth must be >= 1");
  return o;
}

/// Longest time between two reads of the stored schedules, whatever their change counter says.
constexpr std::chrono::seconds kReloadEvery{60};

/// The server's clock: TIME answers [seconds, microseconds].
TimePoint server_time(detail::Connection& conn) {
  const detail::Reply r = conn.command({"TIME"});
  const detail::ReplyView v = r.view().check();
  return TimePoint(std::chrono::seconds(v[0].as_int()) + std::chrono::microseconds(v[1].as_int()));
}

}  // namespace

struct Scheduler::Impl {
  explicit Impl(SchedulerOptions o)
      : options(validated(std::move(o))),
        connection(detail::make_connection_config(
            options.queue.connection, "scheduler",
            detail::partition_stream(options.queue.stream, options.queue.partitions, 0))),
        keys(options.queue.stream, options.queue.partitions) {}

  void main();
  /// One wake-up's work; returns how long to wait. Throws ConnectionError and what the
  /// session set-up, TIME or the store's reads throw.
  milliseconds wake(detail::Connection& conn, detail::ScriptRunner& scripts);
  /// The schedules given in code, stored (source `code`): at start; after a reconnect only
  /// those the server no longer has (restarted without its data), so that a blip does not undo
  /// an operator's change.
  void store_code_schedules(detail::ScriptRunner& scripts, TimePoint now, bool at_start);
  /// Reads every stored schedule again and rebuilds `entries`, keeping what this instance
  /// knows of each (the newest tick it handled; the definition before a switch it saw).
  void reload(detail::Connection& conn);
  detail::ScheduleEntry entry_of(const detail::StoredSchedule& s, const detail::ScheduleEntry* old) const;

  SchedulerOptions options;
  detail::ConnectionConfig connection;
  detail::ScheduleKeys keys;
  std::vector<detail::Definition> code;                  // add()ed
  std::map<std::string, detail::ScheduleEntry> entries;  // by name: what runs
  std::set<std::string> unreadable_logged;   // "<name>@<version>" of definitions that could not be read
  std::uint64_t stored_generation = 0;       // the connection generation code was stored on
  std::optional<std::int64_t> seen_changed;  // the change counter at the last reload
  bool reload_needed = true;
  std::chrono::steady_clock::time_point last_reload{};
  detail::Backoff error_backoff{connection.backoff_base, connection.backoff_max};

  std::mutex mutex;
  std::condition_variable_any cv;
  std::stop_source stop_source;
  std::atomic<bool> started{false};
  std::jthread thread;
  detail::TickCounters counters;
};

void Scheduler::Impl::store_code_schedules(detail::ScriptRunner& scripts, TimePoint now, bool at_start) {
  for (const detail::Definition& d : code) {
    if (!at_start && detail::store_read(scripts.connection(), keys, d.name)) continue;
    const UpsertOutcome outcome = detail::store_upsert(scripts, keys, d, true, now);
    if (outcome == UpsertOutcome::changed) {
      detail::log(LogLevel::info, "schedule \"" + d.name + "\": stored its definition from code (" +
                                      d.schedule.description() + "), which replaces the stored one");
    }
  }
}

detail::ScheduleEntry Scheduler::Impl::entry_of(const detail::StoredSchedule& s,
                                                const detail::ScheduleEntry* old) const {
  const detail::Definition& d = *s.def;
  const std::string partition = keys.partition_of(d.name);
  detail::ScheduleEntry e{
      .current = {d, d.options.max_retries.value_or(options.queue.default_max_retries), s.version},
      .previous = std::nullopt,
      .since = s.since,
      .floor = s.floor,
      .paused = s.paused,
      .keys = detail::queue_keys(partition),
      .key = detail::schedule_key(partition, d.name),
      .handled = std::nullopt,
      .recorded = s.tick,
      .buffered = s.buffered,
      .exhausted = d.options.limit && s.enqueued >= *d.options.limit};
  if (old) {
    e.handled = old->handled;
    // A switch this instance saw happen: the old definition was running here, and the record
    // says it is the one before the new (its ticks up to `since` are still its own).
    if (old->current.version != s.version && old->current.version == s.prev_version &&
        s.since != TimePoint{}) {
      e.previous = old->current;
    } else if (old->current.version == s.version) {
      e.previous = old->previous;
    }
  }
  return e;
}

void Scheduler::Impl::reload(detail::Connection& conn) {
  std::map<std::string, detail::ScheduleEntry> next;
  for (const detail::StoredSchedule& s : detail::store_read_all(conn, keys)) {
    if (!s.def) {
      if (unreadable_logged.insert(s.name + "@" + std::to_string(s.version)).second) {
        detail::log(LogLevel::error, s.unreadable + "; not running it until it is stored again");
      }
      continue;
    }
    const auto old = entries.find(s.name);
    next.emplace(s.name, entry_of(s, old == entries.end() ? nullptr : &old->second));
  }
  entries = std::move(next);
  counters.reloads.fetch_add(1, std::memory_order_relaxed);
}

milliseconds Scheduler::Impl::wake(detail::Connection& conn, detail::ScriptRunner& scripts) {
  if (!conn.connected()) {
    conn.connect();
    if (conn.generation() > 1) counters.reconnects.fetch_add(1, std::memory_order_relaxed);
  }
  const TimePoint now = options.clock ? options.clock() : server_time(conn);
  if (stored_generation != conn.generation()) {
    store_code_schedules(scripts, now, stored_generation == 0);
    stored_generation = conn.generation();
    reload_needed = true;
  }
  // The counter tells of a change within a wake-up; a read every kReloadEvery besides makes a
  // change whose counter write was lost (its client killed between the two) seen all the same.
  const std::int64_t changed = detail::store_changed(conn, keys);
  const auto steady_now = std::chrono::steady_clock::now();
  if (reload_needed || seen_changed != changed || steady_now - last_reload >= kReloadEvery) {
    reload(conn);
    seen_changed = changed;
    reload_needed = false;
    last_reload = steady_now;
  }
  milliseconds wait = options.max_wait;
  TimePoint next = TimePoint::max();
  bool failed = false;
  for (auto& [name, e] : entries) {
    try {
      if (detail::handle_ticks(e, now, scripts, options, counters) == detail::TickHandled::stale) {
        reload_needed = true;
        wait = milliseconds(1);  // read the record again at once
      }
    } catch (const ConnectionError&) {
      throw;
    } catch (const std::exception& ex) {
      // This schedule is retried after a backoff; the others go on.
      counters.errors.fetch_add(1, std::memory_order_relaxed);
      failed = true;
      detail::log(detail::retry_level(ex), "schedule \"" + name + "\": " + ex.what() + "; retrying");
    }
    next = std::min(next, detail::next_wake(e, now));
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
  return wait;
}

void Scheduler::Impl::main() {
  detail::block_sigpipe_for_this_thread();  // library code only runs on this thread
  detail::Connection conn(connection);
  detail::ScriptRunner scripts(conn);
  const std::stop_token stop = stop_source.get_token();
  while (!stop.stop_requested()) {
    milliseconds wait = options.max_wait;
    try {
      wait = wake(conn, scripts);
    } catch (const ConnectionError& ex) {
      counters.errors.fetch_add(1, std::memory_order_relaxed);
      wait = conn.backoff_delay();
      detail::log(LogLevel::warning, std::string("scheduler: ") + ex.what() + "; reconnecting in " +
                                         std::to_string(wait.count()) + " ms");
    } catch (const std::exception& ex) {  // the session set-up was refused, TIME or a read failed
      counters.errors.fetch_add(1, std::memory_order_relaxed);
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
  for (const detail::Definition& d : im.code) {
    if (d.name == name) throw ConfigError("schedule name \"" + name + "\" is already taken");
  }
  detail::Definition d{std::move(name), std::move(schedule), std::move(task_type), payload.text(),
                       std::move(options)};
  detail::check_definition(d, im.options.queue);
  im.code.push_back(std::move(d));
}

void Scheduler::run() {
  Impl& im = *impl_;
  if (im.started.exchange(true)) throw ConfigError("run() or start() was called before");
  im.main();
}

void Scheduler::start() {
  Impl& im = *impl_;
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
  const detail::TickCounters& c = im.counters;
  return {c.enqueued.load(r), c.taken.load(r),      c.skipped.load(r), c.refused.load(r),
          c.errors.load(r),   c.reconnects.load(r), c.reloads.load(r)};
}

const SchedulerOptions& Scheduler::options() const noexcept { return impl_->options; }

}  // namespace streamq
