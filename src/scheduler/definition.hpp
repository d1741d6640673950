// SPDX-License-Identifier: MIT
// A schedule's definition as it is stored in Redis (`def` of its record, JSON) and as the
// Scheduler runs it, and the keys and fields of schedules as data:
// - `<queue's first partition stream>:schedules`: a hash, the names of the stored schedules
//   (each to "1"; a hash rather than a set so that the operator's ACL user needs no command
//   more than it has);
// - `<same>:schedules:changed`: a hash whose field `n` counts the changes, increased by every
//   upsert, remove, pause and
//   resume; a running Scheduler reads it on every wake-up and re-reads the records when it moved;
// - `<partition stream>:sched:<name>` (schedule_key), a hash, the schedule's record: `def`
//   (this JSON; absent once removed), `version` (increased by every change of `def`),
//   `prev_version` and `since` (ms: the switch; the previous definition's ticks at or before
//   it, the current one's after it; 0 = no switch yet), `changed_at` (ms), `source` (`code` or
//   `api`), `paused` (`1`) and `note`, `floor` (ms: resume's time; no tick at or before it),
//   `enqueued` (ticks enqueued, what `limit` counts), and the tick's own `tick`, `outcome`,
//   `task_id`, `running_id` (the task of the last tick enqueued, which Overlap checks) and
//   `buffered` (ms: the tick Overlap::buffer_one keeps) (schedule_tick.lua);
// - `<record>:ticks` (ticks_key), a sorted set: the ticks enqueued (member and score: the tick's
//   ms; by the schedule or a backfill, the newest 10,000), so that a backfill adds none twice.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "streamq/scheduler.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

/// One schedule: what Scheduler::add and Schedules::upsert take, what the record stores.
struct Definition {
  std::string name;
  Schedule schedule;
  std::string task_type;
  std::string payload;  // JSON text, checked
  ScheduledTaskOptions options;
};

/// A stored definition as one instance runs it.
struct RunningDefinition {
  Definition def;
  int max_retries = 3;       // resolved: the schedule's, else the queue's default
  std::int64_t version = 0;  // the record's `version` this was read at
};

/// ConfigError / PayloadError unless `d` can be stored and run (the rules of Scheduler::add).
void check_definition(const Definition& d, const QueueOptions& queue);

/// The stored form: one JSON object, its keys always in the same order (so an upsert of the
/// same definition writes the same text, and is found unchanged).
std::string definition_json(const Definition& d);
/// Reads what definition_json wrote. @throws Error naming the schedule when it cannot.
Definition definition_from_json(std::string_view name, std::string_view json);

/// The names the stored form (and ScheduleInfo::to_json) gives the policies' values.
const char* priority_text(Priority p);
const char* overlap_text(Overlap o);
const char* missed_text(MissedTicks m);

/// The registry of the queue's stored schedules and its change counter.
inline std::string schedules_key(std::string_view first_partition_stream) {
  return concat(first_partition_stream, ":schedules");
}
inline std::string schedules_changed_key(std::string_view first_partition_stream) {
  return concat(first_partition_stream, ":schedules:changed");
}

/// The enqueued ticks of the schedule whose record is `record_key`.
inline std::string ticks_key(std::string_view record_key) { return concat(record_key, ":ticks"); }

/// The partition (0-based) schedule `name` lives in: CRC16 of its name mod partitions.
int schedule_partition(std::string_view name, int partitions);

}  // namespace streamq::detail
