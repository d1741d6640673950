// SPDX-License-Identifier: MIT
// Schedules: the stored schedules of one queue, through store.hpp, and ScheduleInfo's JSON.
#include "streamq/schedules.hpp"

#include <nlohmann/json.hpp>

#include "redis/connection.hpp"
#include "redis/connection_config.hpp"
#include "redis/scripts.hpp"
#include "scheduler/cron.hpp"
#include "scheduler/definition.hpp"
#include "scheduler/store.hpp"
#include "scheduler/tick_script.hpp"
#include "streamq/errors.hpp"
#include "util/durations.hpp"
#include "wire/codec.hpp"

namespace streamq {

using std::chrono::milliseconds;
using TimePoint = std::chrono::system_clock::time_point;

namespace {

constexpr std::int64_t kMaxBackfillTicks = 1000;

QueueOptions validated(QueueOptions q) {
  if (q.stream.empty()) throw ConfigError("stream must not be empty");
  detail::check_partitions(q.partitions, q.stream);
  return q;
}

std::string iso(TimePoint t) { return detail::format_tick(t); }

/// The ticks of `d` in [from, to] and within its start and end, oldest first.
/// @throws ConfigError for more than kMaxBackfillTicks.
std::vector<TimePoint> backfill_ticks(const detail::Definition& d, TimePoint from, TimePoint to) {
  const ScheduledTaskOptions& o = d.options;
  if (o.start) from = std::max(from, *o.start);
  if (o.end) to = std::min(to, *o.end);
  std::vector<TimePoint> ticks;
  for (TimePoint t = d.schedule.next_after(from - milliseconds(1)); t != TimePoint::max() && t <= to;
       t = d.schedule.next_after(t)) {
    if (static_cast<std::int64_t>(ticks.size()) == kMaxBackfillTicks) {
      throw ConfigError("backfill of schedule \"" + d.name + "\": the range holds more than " +
                        std::to_string(kMaxBackfillTicks) + " ticks");
    }
    ticks.push_back(t);
  }
  return ticks;
}

}  // namespace

std::string ScheduleInfo::to_json() const {
  nlohmann::ordered_json j;
  j["name"] = name;
  j["schedule"] = schedule;
  j["task_type"] = task_type;
  j["payload"] = payload;
  j["from_code"] = from_code;
  j["paused"] = paused;
  j["note"] = note;
  j["version"] = version;
  j["changed_at"] =
      changed_at == TimePoint{} ? nlohmann::ordered_json() : nlohmann::ordered_json(iso(changed_at));
  nlohmann::ordered_json next = nlohmann::ordered_json::array();
  for (const TimePoint t : next_ticks) next.push_back(iso(t));
  j["next_ticks"] = next;
  j["last_tick"] = last_tick ? nlohmann::ordered_json(iso(*last_tick)) : nlohmann::ordered_json();
  j["last_outcome"] = last_outcome;
  j["last_task_id"] = last_task_id;
  j["enqueued"] = enqueued;
  const ScheduledTaskOptions& o = options;
  nlohmann::ordered_json opts;
  opts["max_retries"] = o.max_retries ? nlohmann::ordered_json(*o.max_retries) : nlohmann::ordered_json();
  opts["priority"] = detail::priority_text(o.priority);
  opts["start"] = o.start ? nlohmann::ordered_json(iso(*o.start)) : nlohmann::ordered_json();
  opts["end"] = o.end ? nlohmann::ordered_json(iso(*o.end)) : nlohmann::ordered_json();
  opts["limit"] = o.limit ? nlohmann::ordered_json(*o.limit) : nlohmann::ordered_json();
  opts["jitter_ms"] = o.jitter.count();
  opts["overlap"] = detail::overlap_text(o.overlap);
  opts["catch_up"] = o.catch_up ? nlohmann::ordered_json(detail::missed_text(o.catch_up->policy)) : nullptr;
  if (o.catch_up && o.catch_up->policy == MissedTicks::all_within) {
    opts["catch_up_window_ms"] = o.catch_up->window.count();
  }
  j["options"] = opts;
  return j.dump();
}

struct Schedules::Impl {
  Impl(QueueOptions q, std::function<TimePoint()> c)
      : queue(validated(std::move(q))),
        clock(std::move(c)),
        conn(detail::make_connection_config(queue.connection, "schedules",
                                            detail::partition_stream(queue.stream, queue.partitions, 0))),
        scripts(conn),
        keys(queue.stream, queue.partitions) {}

  detail::Connection& connected() {
    conn.connect_with_backoff();
    return conn;
  }
  TimePoint now() {
    if (clock) return clock();
    const detail::Reply r = connected().command({"TIME"});
    const detail::ReplyView v = r.view().check();
    return TimePoint(std::chrono::seconds(v[0].as_int()) + std::chrono::microseconds(v[1].as_int()));
  }
  ScheduleInfo info(const detail::StoredSchedule& s, TimePoint at, std::size_t count) const;

  QueueOptions queue;
  std::function<TimePoint()> clock;
  detail::Connection conn;
  detail::ScriptRunner scripts;
  detail::ScheduleKeys keys;
};

ScheduleInfo Schedules::Impl::info(const detail::StoredSchedule& s, TimePoint at, std::size_t count) const {
  ScheduleInfo i;
  i.name = s.name;
  i.from_code = s.from_code;
  i.paused = s.paused;
  i.note = s.note;
  i.version = s.version;
  i.changed_at = s.changed_at;
  i.last_tick = s.tick;
  i.last_outcome = s.outcome;
  i.last_task_id = s.task_id;
  i.enqueued = s.enqueued;
  if (!s.def) {
    i.schedule = "(unreadable: " + s.unreadable + ")";
    return i;
  }
  const detail::Definition& d = *s.def;
  i.schedule = d.schedule.description();
  i.task_type = d.task_type;
  i.payload = d.payload;
  i.options = d.options;
  if (s.paused || (d.options.limit && s.enqueued >= *d.options.limit)) return i;
  TimePoint t = std::max({at, s.since, s.floor});
  if (d.options.start && *d.options.start > t) t = *d.options.start - milliseconds(1);
  while (i.next_ticks.size() < count) {
    t = d.schedule.next_after(t);
    if (t == TimePoint::max() || (d.options.end && t > *d.options.end)) break;
    if (d.options.limit && s.enqueued + static_cast<std::int64_t>(i.next_ticks.size()) >= *d.options.limit)
      break;
    i.next_ticks.push_back(t);
  }
  return i;
}

Schedules::Schedules(QueueOptions queue, std::function<TimePoint()> clock)
    : impl_(std::make_unique<Impl>(std::move(queue), std::move(clock))) {}
Schedules::~Schedules() = default;
Schedules::Schedules(Schedules&&) noexcept = default;
Schedules& Schedules::operator=(Schedules&&) noexcept = default;

UpsertOutcome Schedules::upsert(const std::string& name, const Schedule& schedule,
                                const std::string& task_type, const Payload& payload,
                                const ScheduledTaskOptions& options) {
  Impl& im = *impl_;
  const detail::Definition d{name, schedule, task_type, payload.text(), options};
  detail::check_definition(d, im.queue);
  const TimePoint now = im.now();
  im.connected();
  return detail::store_upsert(im.scripts, im.keys, d, false, now);
}

bool Schedules::remove(const std::string& name) {
  Impl& im = *impl_;
  const TimePoint now = im.now();
  im.connected();
  return detail::store_change(im.scripts, im.keys, "remove", name, "", now);
}

bool Schedules::pause(const std::string& name, const std::string& note) {
  Impl& im = *impl_;
  const TimePoint now = im.now();
  im.connected();
  return detail::store_change(im.scripts, im.keys, "pause", name, note, now);
}

bool Schedules::resume(const std::string& name) {
  Impl& im = *impl_;
  const TimePoint now = im.now();
  im.connected();
  return detail::store_change(im.scripts, im.keys, "resume", name, "", now);
}

std::vector<ScheduleInfo> Schedules::list(std::size_t next_ticks) {
  Impl& im = *impl_;
  const TimePoint now = im.now();
  std::vector<ScheduleInfo> out;
  for (const detail::StoredSchedule& s : detail::store_read_all(im.connected(), im.keys)) {
    out.push_back(im.info(s, now, next_ticks));
  }
  return out;
}

std::optional<ScheduleInfo> Schedules::get(const std::string& name, std::size_t next_ticks) {
  Impl& im = *impl_;
  const TimePoint now = im.now();
  const std::optional<detail::StoredSchedule> s = detail::store_read(im.connected(), im.keys, name);
  if (!s) return std::nullopt;
  return im.info(*s, now, next_ticks);
}

BackfillResult Schedules::backfill(const std::string& name, TimePoint from, TimePoint to) {
  Impl& im = *impl_;
  if (from > to) throw ConfigError("backfill of schedule \"" + name + "\": from is after to");
  const std::optional<detail::StoredSchedule> s = detail::store_read(im.connected(), im.keys, name);
  if (!s) throw ConfigError("backfill: there is no schedule \"" + name + "\"");
  if (!s->def) throw ConfigError("backfill: " + s->unreadable);
  const detail::Definition& d = *s->def;
  const TimePoint now = im.now();
  if (to > now) {
    throw ConfigError("backfill of schedule \"" + name + "\": to is in the future (" +
                      detail::format_tick(to) + "); the Scheduler enqueues the ticks to come");
  }
  const std::vector<TimePoint> ticks = backfill_ticks(d, from, to);
  const std::string partition = im.keys.partition_of(name);
  const detail::QueueKeys keys = detail::queue_keys(partition);
  const std::string record = detail::schedule_key(partition, name);
  const detail::RunningDefinition running{d, d.options.max_retries.value_or(im.queue.default_max_retries),
                                          s->version};
  BackfillResult out;
  for (const TimePoint t : ticks) {
    const detail::TickReply r =
        detail::call_tick_script(im.scripts, keys, record, running, im.queue,
                                 {.mode = detail::TickMode::backfill, .tick = t, .now = now});
    switch (r.code) {
      case detail::tick_code::enqueued: out.enqueued.push_back(detail::tick_task_id(name, t)); break;
      case detail::tick_code::taken: ++out.already; break;
      case detail::tick_code::refused:
        throw QueueFullError("backfill of schedule \"" + name + "\": queue full (" + r.detail +
                                 " entries, max_len " + std::to_string(im.queue.max_len) + ") at tick " +
                                 iso(t) + "; " + std::to_string(out.enqueued.size()) +
                                 " ticks enqueued before it",
                             out.enqueued);
      case detail::tick_code::stale:
        throw Error("backfill of schedule \"" + name +
                    "\": its definition changed (or it was removed) at tick " + iso(t) + "; " +
                    std::to_string(out.enqueued.size()) + " ticks enqueued before it");
      default: throw Error("schedule_tick (backfill) returned " + std::to_string(r.code));
    }
  }
  return out;
}

}  // namespace streamq
