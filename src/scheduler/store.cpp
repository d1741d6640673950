// SPDX-License-Identifier: MIT
#include "scheduler/store.hpp"

#include <algorithm>
#include <charconv>
#include <map>

#include "streamq/errors.hpp"
#include "util/durations.hpp"

namespace streamq::detail {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::system_clock::time_point;

std::int64_t number_or(std::string_view s, std::int64_t otherwise) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() ? v : otherwise;
}

/// The fields HMGET reads of a record, in this order.
constexpr std::string_view record_fields[] = {"def",     "version", "prev_version", "since",    "changed_at",
                                              "source",  "paused",  "note",         "floor",    "tick",
                                              "outcome", "task_id", "enqueued",     "buffered", "running_id"};

Argv read_record(const std::string& key) {
  Argv argv{"HMGET"};
  argv.add(key);
  for (const std::string_view f : record_fields) argv.add(f);
  return argv;
}

/// A record from its HMGET reply; unset when it holds no definition.
std::optional<StoredSchedule> parse_record(const std::string& name, const Reply& reply) {
  const ReplyView v = reply.view().check();
  auto text = [&](std::size_t i) { return v[i].is_nil() ? std::string_view() : v[i].str(); };
  if (v[0].is_nil()) return std::nullopt;
  StoredSchedule s;
  s.name = name;
  s.def_json = std::string(text(0));
  try {
    s.def = definition_from_json(name, s.def_json);
  } catch (const std::exception& e) {
    s.unreadable = e.what();
  }
  s.version = number_or(text(1), 0);
  s.prev_version = number_or(text(2), 0);
  s.since = TimePoint(milliseconds(number_or(text(3), 0)));
  s.changed_at = TimePoint(milliseconds(number_or(text(4), 0)));
  s.from_code = text(5) == "code";
  s.paused = text(6) == "1";
  s.note = std::string(text(7));
  s.floor = TimePoint(milliseconds(number_or(text(8), 0)));
  if (!v[9].is_nil()) s.tick = TimePoint(milliseconds(number_or(text(9), 0)));
  s.outcome = std::string(text(10));
  s.task_id = std::string(text(11));
  s.enqueued = number_or(text(12), 0);
  if (!v[13].is_nil()) s.buffered = TimePoint(milliseconds(number_or(text(13), 0)));
  s.running_id = std::string(text(14));
  return s;
}

/// The registry and counter follow a change of the record: one pipeline in their slot.
void note_change(Connection& conn, const ScheduleKeys& keys, const std::string& name, bool stored) {
  std::vector<Argv> commands;
  if (stored) {
    commands.push_back(Argv{"HSET", keys.registry, name, "1"});
  } else {
    commands.push_back(Argv{"HDEL", keys.registry, name});
  }
  commands.push_back(Argv{"HINCRBY", keys.changed, "n", "1"});
  for (const Reply& r : conn.pipeline(commands)) r.view().check();
}

}  // namespace

ScheduleKeys::ScheduleKeys(std::string s, int n)
    : stream(std::move(s)),
      partitions(n),
      registry(schedules_key(partition_stream(stream, n, 0))),
      changed(schedules_changed_key(partition_stream(stream, n, 0))) {}

std::string ScheduleKeys::partition_of(std::string_view name) const {
  return partition_stream(stream, partitions, schedule_partition(name, partitions));
}

std::string ScheduleKeys::record_of(std::string_view name) const {
  return schedule_key(partition_of(name), name);
}

UpsertOutcome store_upsert(ScriptRunner& scripts, const ScheduleKeys& keys, const Definition& d,
                           bool from_code, TimePoint now) {
  const std::string json = definition_json(d);
  Argv argv = scripts.begin(ScriptId::schedule_store, 1);
  argv.add_copy(keys.record_of(d.name))
      .add("upsert")
      .add(json)
      .add(from_code ? "code" : "api")
      .add(unix_ms(now));
  const Reply reply = scripts.call(ScriptId::schedule_store, argv);
  const std::int64_t code = reply.view().check()[0].integer();
  // Also when unchanged: a registry lost with its data (a Redis restart without persistence)
  // is written again by the next upsert of each schedule.
  note_change(scripts.connection(), keys, d.name, true);
  return code == 0 ? UpsertOutcome::unchanged : code == 1 ? UpsertOutcome::created : UpsertOutcome::changed;
}

bool store_change(ScriptRunner& scripts, const ScheduleKeys& keys, std::string_view op,
                  const std::string& name, const std::string& note, TimePoint now) {
  Argv argv = scripts.begin(ScriptId::schedule_store, 1);
  argv.add_copy(keys.record_of(name)).add(op).add(note).add("").add(unix_ms(now));
  const Reply reply = scripts.call(ScriptId::schedule_store, argv);
  const bool found = reply.view().check()[0].integer() == 1;
  if (found || op == "remove") note_change(scripts.connection(), keys, name, op != "remove");
  return found;
}

std::int64_t store_changed(Connection& conn, const ScheduleKeys& keys) {
  const Reply reply = conn.command(Argv{"HGET", keys.changed, "n"});
  const ReplyView v = reply.view().check();
  return v.is_nil() ? 0 : number_or(v.str(), 0);
}

std::vector<StoredSchedule> store_read_all(Connection& conn, const ScheduleKeys& keys) {
  const Reply members = conn.command(Argv{"HKEYS", keys.registry});
  const ReplyView m = members.view().check();
  std::vector<std::string> names;
  names.reserve(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) names.emplace_back(m[i].str());
  std::sort(names.begin(), names.end());
  // One pipeline per partition: on Cluster each goes to its own master.
  std::map<std::string, std::vector<std::size_t>> by_partition;
  for (std::size_t i = 0; i < names.size(); ++i) by_partition[keys.partition_of(names[i])].push_back(i);
  std::vector<std::optional<StoredSchedule>> read(names.size());
  for (const auto& [partition, indexes] : by_partition) {
    std::vector<std::string> record_keys;
    std::vector<Argv> commands;
    record_keys.reserve(indexes.size());
    commands.reserve(indexes.size());
    for (const std::size_t i : indexes) record_keys.push_back(schedule_key(partition, names[i]));
    for (const std::string& k : record_keys) commands.push_back(read_record(k));
    const std::vector<Reply> replies = conn.pipeline(commands);
    for (std::size_t j = 0; j < indexes.size(); ++j)
      read[indexes[j]] = parse_record(names[indexes[j]], replies[j]);
  }
  std::vector<StoredSchedule> out;
  for (std::optional<StoredSchedule>& s : read) {
    if (s) out.push_back(std::move(*s));
  }
  return out;
}

std::optional<StoredSchedule> store_read(Connection& conn, const ScheduleKeys& keys,
                                         const std::string& name) {
  const std::string key = keys.record_of(name);
  return parse_record(name, conn.command(read_record(key)));
}

}  // namespace streamq::detail
