// SPDX-License-Identifier: MIT
#include "scheduler/definition.hpp"

#include <nlohmann/json.hpp>

#include "redis/cluster.hpp"
#include "streamq/errors.hpp"
#include "util/durations.hpp"
#include "wire/codec.hpp"

namespace streamq::detail {

using std::chrono::milliseconds;
using TimePoint = std::chrono::system_clock::time_point;

namespace {

Priority priority_of(const std::string& s) {
  if (s == "high") return Priority::high;
  if (s == "low") return Priority::low;
  if (s == "normal") return Priority::normal;
  throw Error("priority \"" + s + "\"");
}

Overlap overlap_of(const std::string& s) {
  if (s == "allow") return Overlap::allow;
  if (s == "skip") return Overlap::skip;
  if (s == "buffer_one") return Overlap::buffer_one;
  throw Error("overlap \"" + s + "\"");
}

MissedTicks missed_of(const std::string& s) {
  if (s == "enqueue_once") return MissedTicks::enqueue_once;
  if (s == "skip") return MissedTicks::skip;
  if (s == "all_within") return MissedTicks::all_within;
  throw Error("catch_up \"" + s + "\"");
}

}  // namespace

const char* priority_text(Priority p) {
  switch (p) {
    case Priority::high: return "high";
    case Priority::low: return "low";
    case Priority::normal: break;
  }
  return "normal";
}

const char* overlap_text(Overlap o) {
  switch (o) {
    case Overlap::skip: return "skip";
    case Overlap::buffer_one: return "buffer_one";
    case Overlap::allow: break;
  }
  return "allow";
}

const char* missed_text(MissedTicks m) {
  switch (m) {
    case MissedTicks::skip: return "skip";
    case MissedTicks::all_within: return "all_within";
    case MissedTicks::enqueue_once: break;
  }
  return "enqueue_once";
}

int schedule_partition(std::string_view name, int partitions) {
  return partitions <= 1 ? 0 : static_cast<int>(crc16(name) % static_cast<unsigned>(partitions));
}

void check_definition(const Definition& d, const QueueOptions& queue) {
  const std::string& name = d.name;
  const ScheduledTaskOptions& o = d.options;
  if (name.empty()) throw ConfigError("schedule name must not be empty");
  if (d.task_type.empty()) throw ConfigError("task_type of schedule \"" + name + "\" must not be empty");
  if (o.max_retries && *o.max_retries < 0) {
    throw ConfigError("max_retries of schedule \"" + name + "\" must be >= 0");
  }
  if (o.extra_fields.size() + std::size(task_fields) > kMaxFields) {
    throw ConfigError("schedule \"" + name + "\" has more than " +
                      std::to_string(kMaxFields - std::size(task_fields)) + " extra fields");
  }
  for (const auto& [field, value] : o.extra_fields) {
    if (field.empty() || is_reserved_field(field)) {
      throw ConfigError("extra field name \"" + field + "\" of schedule \"" + name +
                        "\" is empty or reserved");
    }
  }
  if (o.priority != Priority::high && o.priority != Priority::normal && o.priority != Priority::low) {
    throw ConfigError("priority of schedule \"" + name + "\" is not a Priority");
  }
  if (o.retention) {
    check_duration(o.retention->done, milliseconds(0), "retention.done of schedule \"" + name + "\"");
    if (o.retention->dead) {
      check_duration(*o.retention->dead, milliseconds(0), "retention.dead of schedule \"" + name + "\"");
    }
  }
  if (o.start && o.end && *o.end < *o.start) {
    throw ConfigError("end of schedule \"" + name + "\" is before its start");
  }
  if (o.limit && *o.limit <= 0) throw ConfigError("limit of schedule \"" + name + "\" must be > 0");
  check_duration(o.jitter, milliseconds(0), "jitter of schedule \"" + name + "\"");
  if (o.jitter.count() > 0) {
    // Below the shortest gap between two ticks (looked for over a year's first ticks), or a
    // tick's task could come after the next one's, which would then have taken its place.
    TimePoint t = d.schedule.next_after(from_unix_ms(1767225600000));  // 2026-01-01T00:00:00Z
    for (int i = 0; i < 64 && t != TimePoint::max(); ++i) {
      const TimePoint next = d.schedule.next_after(t);
      if (next != TimePoint::max() && next - t <= o.jitter) {
        throw ConfigError(
            "jitter of schedule \"" + name + "\" must be below the time between two of its ticks (" +
            std::to_string(std::chrono::duration_cast<milliseconds>(next - t).count()) + " ms)");
      }
      t = next;
    }
  }
  if (o.overlap != Overlap::allow && o.overlap != Overlap::skip && o.overlap != Overlap::buffer_one) {
    throw ConfigError("overlap of schedule \"" + name + "\" is not an Overlap");
  }
  if (o.catch_up) {
    const MissedTicks p = o.catch_up->policy;
    if (p != MissedTicks::enqueue_once && p != MissedTicks::skip && p != MissedTicks::all_within) {
      throw ConfigError("catch_up of schedule \"" + name + "\" is not a MissedTicks");
    }
    if (p == MissedTicks::all_within) {
      check_duration(o.catch_up->window, milliseconds(1), "catch_up.window of schedule \"" + name + "\"");
    }
  }
  if (auto problem = payload_problem(d.payload, queue.max_payload_bytes, queue.max_payload_depth)) {
    throw PayloadError("payload of schedule \"" + name + "\": " + *problem);
  }
}

std::string definition_json(const Definition& d) {
  const ScheduledTaskOptions& o = d.options;
  nlohmann::ordered_json j;
  j["schedule"] = d.schedule.description();
  j["task_type"] = d.task_type;
  j["payload"] = d.payload;
  if (o.max_retries) j["max_retries"] = *o.max_retries;
  if (!o.extra_fields.empty()) j["extra_fields"] = o.extra_fields;
  j["priority"] = priority_text(o.priority);
  if (o.retention) {
    j["retention_done_ms"] = o.retention->done.count();
    if (o.retention->dead) j["retention_dead_ms"] = o.retention->dead->count();
  }
  if (o.start) j["start_ms"] = unix_ms(*o.start);
  if (o.end) j["end_ms"] = unix_ms(*o.end);
  if (o.limit) j["limit"] = *o.limit;
  if (o.jitter.count() > 0) j["jitter_ms"] = o.jitter.count();
  j["overlap"] = overlap_text(o.overlap);
  if (o.catch_up) {
    j["catch_up"] = missed_text(o.catch_up->policy);
    if (o.catch_up->policy == MissedTicks::all_within) j["catch_up_window_ms"] = o.catch_up->window.count();
  }
  return j.dump();
}

Definition definition_from_json(std::string_view name, std::string_view json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    ScheduledTaskOptions o;
    if (j.contains("max_retries")) o.max_retries = j.at("max_retries").get<int>();
    if (j.contains("extra_fields")) {
      o.extra_fields = j.at("extra_fields").get<std::vector<std::pair<std::string, std::string>>>();
    }
    o.priority = priority_of(j.value("priority", std::string("normal")));
    if (j.contains("retention_done_ms")) {
      o.retention = Retention{.done = milliseconds(j.at("retention_done_ms").get<std::int64_t>())};
      if (j.contains("retention_dead_ms")) {
        o.retention->dead = milliseconds(j.at("retention_dead_ms").get<std::int64_t>());
      }
    }
    if (j.contains("start_ms")) o.start = from_unix_ms(j.at("start_ms").get<std::int64_t>());
    if (j.contains("end_ms")) o.end = from_unix_ms(j.at("end_ms").get<std::int64_t>());
    if (j.contains("limit")) o.limit = j.at("limit").get<std::int64_t>();
    o.jitter = milliseconds(j.value("jitter_ms", std::int64_t{0}));
    o.overlap = overlap_of(j.value("overlap", std::string("allow")));
    if (j.contains("catch_up")) {
      o.catch_up = CatchUp{missed_of(j.at("catch_up").get<std::string>()),
                           milliseconds(j.value("catch_up_window_ms", std::int64_t{0}))};
    }
    return Definition{std::string(name), Schedule::parse(j.at("schedule").get<std::string>()),
                      j.at("task_type").get<std::string>(), j.at("payload").get<std::string>(), std::move(o)};
  } catch (const std::exception& e) {
    throw Error("schedule \"" + std::string(name) + "\": its stored definition cannot be read (" + e.what() +
                ")");
  }
}

}  // namespace streamq::detail
