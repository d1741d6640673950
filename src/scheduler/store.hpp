// SPDX-License-Identifier: MIT
// Schedules as data: reading and changing the stored schedules of a queue (the keys of
// definition.hpp), for the Schedules class and the Scheduler. Each change of a record is one
// call of the schedule_store script; the registry and its change counter follow in one
// pipeline (on Redis Cluster they may sit in another slot than the record).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "scheduler/definition.hpp"
#include "streamq/schedules.hpp"

namespace streamq::detail {

/// Where a queue's schedules are.
struct ScheduleKeys {
  std::string stream;  // the queue's stream (as given)
  int partitions = 1;
  std::string registry;  // schedules_key of the first partition
  std::string changed;   // schedules_changed_key of the first partition

  ScheduleKeys(std::string stream, int partitions);
  /// The stream of the partition `name`'s ticks go to, and its record there.
  std::string partition_of(std::string_view name) const;
  std::string record_of(std::string_view name) const;
};

/// A record as read: the definition (unset once removed, or never stored) and its state.
struct StoredSchedule {
  std::string name;
  std::optional<Definition> def;
  std::string def_json;
  std::int64_t version = 0;
  std::int64_t prev_version = 0;
  std::chrono::system_clock::time_point since{};       // 0 = no switch
  std::chrono::system_clock::time_point changed_at{};  // 0 = never
  bool from_code = false;
  bool paused = false;
  std::string note;
  std::chrono::system_clock::time_point floor{};
  std::optional<std::chrono::system_clock::time_point> tick;
  std::string outcome;
  std::string task_id;
  std::int64_t enqueued = 0;
  std::optional<std::chrono::system_clock::time_point> buffered;  // Overlap::buffer_one's kept tick
  std::string running_id;                                         // the task of the last tick enqueued
  /// Why the stored definition could not be read (the record is then skipped by Schedulers).
  std::string unreadable;
};

/// Stores `d` (source `code` or `api`) at `now`. Throws ConnectionError / ReplyError.
UpsertOutcome store_upsert(ScriptRunner& scripts, const ScheduleKeys& keys, const Definition& d,
                           bool from_code, std::chrono::system_clock::time_point now);
/// `remove`, `pause` (with `note`) or `resume` (at `now`): false when no such schedule.
bool store_change(ScriptRunner& scripts, const ScheduleKeys& keys, std::string_view op,
                  const std::string& name, const std::string& note,
                  std::chrono::system_clock::time_point now);
/// The change counter (0 when never changed).
std::int64_t store_changed(Connection& conn, const ScheduleKeys& keys);
/// Every record the registry names, sorted by name (one HKEYS, then one pipeline per
/// partition's records).
std::vector<StoredSchedule> store_read_all(Connection& conn, const ScheduleKeys& keys);
/// One record; unset when it holds no definition.
std::optional<StoredSchedule> store_read(Connection& conn, const ScheduleKeys& keys, const std::string& name);

}  // namespace streamq::detail
