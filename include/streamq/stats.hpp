// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamq/common.hpp"
#include "streamq/export.hpp"

namespace streamq {

/// StatsReader configuration.
struct STREAMQ_EXPORT StatsOptions {
  ConnectionOptions connection{};
  std::string stream = "task_queue";
  /// Report only this consumer group; empty = every group of the stream.
  std::string group{};
  /// The queue's partitions (ProducerOptions::partitions): > 1 reads each partition and
  /// reports their sum.
  int partitions = 1;
};

/// One consumer of a group, from XINFO CONSUMERS.
struct STREAMQ_EXPORT ConsumerInfo {
  std::string name;
  /// Entries delivered to this consumer and not yet acknowledged.
  std::int64_t pending = 0;
  /// Milliseconds since this consumer last read or claimed (Redis 7.0 `idle`).
  std::int64_t idle_ms = 0;
};

/// One consumer group, from XINFO GROUPS, XINFO CONSUMERS and XPENDING.
struct STREAMQ_EXPORT GroupInfo {
  std::string name;
  /// Delivered, not yet acknowledged entries (the group's PEL).
  std::int64_t pending = 0;
  /// Entries not yet delivered to the group (Redis >= 7.0). Unset when Redis cannot tell
  /// (after XDEL/trimming, or on 6.2); it overstates readable entries after trimming.
  std::optional<std::int64_t> lag;
  std::string last_delivered_id;
  std::vector<ConsumerInfo> consumers;
  /// Idle time of the oldest pending entry (lowest id in the PEL); unset when none.
  std::optional<std::int64_t> oldest_pending_idle_ms;
};

/// One priority level of a queue: its own stream (`<stream>:p:high`, `<stream>`,
/// `<stream>:p:low`).
struct STREAMQ_EXPORT LevelStats {
  Priority priority = Priority::normal;
  /// "high", "normal" or "low" (the `level` label).
  std::string level;
  std::string stream;
  /// False when the level's stream does not exist (every number is then 0).
  bool exists = false;
  /// XLEN: unfinished entries of this level.
  std::int64_t length = 0;
  /// Entries ever added to this level's stream (Redis >= 7.0; 0 when unknown).
  std::int64_t entries_added = 0;
  /// Delivered, unacknowledged entries of this level, over every reported group.
  std::int64_t pending = 0;
  /// Entries of this level not yet delivered, summed over the reported groups; unset when a
  /// group cannot tell (see GroupInfo::lag) or no group is reported.
  std::optional<std::int64_t> lag;
  /// Age of this level's oldest entry by the server's clock; unset when it is empty.
  std::optional<std::int64_t> oldest_entry_age_ms;
};

/// A snapshot of one queue's health. `length` and `pending_total`, the numbers to alert on,
/// count the whole queue: every priority level. The other fields before `levels` describe the
/// queue's own stream (normal priority, the one the seed's code uses); `levels` has each
/// level's numbers.
// The deprecated fields warn where a program uses them, not in the members the compiler
// writes for the struct (copy, move, construction), which are reported at its own line.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct STREAMQ_EXPORT QueueStats {
  /// The stream; with StatsOptions::partitions > 1 the queue's name, every number below the
  /// sum over its partitions (ages and the oldest pending idle time the largest, due times the
  /// soonest, a consumer's idle time the smallest, a group's or consumer's counts summed by
  /// name; `oldest_entry_id` the oldest partition's, and a group's `last_delivered_id` empty: no
  /// one id stands for several streams).
  std::string stream;
  /// The partitions read (StatsOptions::partitions).
  int partitions = 1;
  /// False when the queue's own stream (the normal level) does not exist (its numbers are then
  /// 0; `length` and `pending_total` still count the other levels).
  bool exists = false;
  /// Unfinished entries of the whole queue (streamq deletes finished ones): the XLEN of every
  /// priority level, summed. (Before 0.2: the normal level's only; see levels.)
  std::int64_t length = 0;
  /// Entries ever added to the queue's own stream (Redis >= 7.0; 0 when unknown).
  std::int64_t entries_added = 0;
  /// Delivered, unacknowledged entries of the whole queue: every reported group's pending
  /// count on every level, summed. (Before 0.2: the normal level's only; see levels.)
  std::int64_t pending_total = 0;
  /// XLEN of `<stream>:dlq`.
  std::int64_t dlq_length = 0;
  /// Entries ever added to `<stream>:dlq` (Redis >= 7.0; 0 when unknown or no dead letter yet):
  /// tasks dead-lettered so far, which replay, delete and purge do not lower (purge restarts it).
  std::int64_t dlq_entries_added = 0;
  /// ZCARD of `<stream>:delayed` (delayed tasks; 0 while no task is delayed).
  std::int64_t delayed = 0;
  /// Tasks waiting in the backlogs of the queue's tenants (EnqueueOptions::tenant,
  /// docs/tenants.md), every level: the LLEN of each backlog of the tenants in
  /// `<stream>:tenants:ready` and `:tenants:waiting`, summed. Not in `length` (they are in no
  /// stream yet). A snapshot costs three LLEN per such tenant, so it is counted only while a
  /// partition has at most 1,000 of them (backlog_tenants): unset beyond (Inspector::tenants
  /// lists the largest backlogs), and unset when the user may not read the tenants' keys
  /// (NOPERM: see the stats role of docs/operations.md).
  std::optional<std::int64_t> backlog;
  /// The tenants that have a backlog (ZCARD of the ready and waiting sets); unset when the user
  /// may not read them.
  std::optional<std::int64_t> backlog_tenants;
  /// When the next delayed task is due (ms since the Unix epoch, by the server's clock), and
  /// how long from now that is (negative: overdue, the forwarders are behind); empty when no
  /// task is delayed.
  std::optional<std::int64_t> next_delayed_due_ms;
  std::optional<std::int64_t> next_delayed_due_in_ms;
  /// Id of the oldest entry still in the stream; empty when the stream is empty.
  std::string oldest_entry_id;
  /// Age of that entry by the server's clock (its id's millisecond part vs TIME).
  std::optional<std::int64_t> oldest_entry_age_ms;
  /// The groups of the queue's own stream (the normal level).
  std::vector<GroupInfo> groups;
  /// Every priority level, in order high, normal, low.
  std::vector<LevelStats> levels;
  /// The same as `length`; removed in 0.3.
  [[deprecated("QueueStats::length counts every level now")]] std::int64_t total_length = 0;
  /// The same as `pending_total`; removed in 0.3.
  [[deprecated("QueueStats::pending_total counts every level now")]] std::int64_t total_pending = 0;

  /// JSON object; the seed's keys (queue_length = `length`, pending_total, consumers_active,
  /// dlq_length, oldest_message) plus everything above (`backlog` and `backlog_tenants` null when
  /// unset; `levels`: an array of objects with
  /// `level`, `stream`, `exists`, `length`, `entries_added`, `pending`, `lag`,
  /// `oldest_entry_age_ms`; `total_length` and `total_pending`, deprecated: the same as
  /// `queue_length` and `pending_total`).
  std::string to_json() const;
  /// Prometheus text exposition (format 0.0.4): `streamq_*` metrics with `stream`, `group`
  /// and `consumer` labels, each with # HELP and # TYPE lines; the per-level families
  /// (`streamq_level_*`) carry a `level` label ("high", "normal", "low").
  std::string to_prometheus() const;
};
#pragma GCC diagnostic pop

/// The Prometheus text exposition of several queues (what QueueStats::to_prometheus writes
/// for one): each metric family once, with a sample per queue, so the text parses as one
/// scrape (the exporter's /metrics).
STREAMQ_EXPORT std::string to_prometheus(const std::vector<QueueStats>& queues);

/// Reads queue health without changing anything (and without creating any key).
///
/// Thread safety: calls may overlap from any number of threads; they take turns on its one
/// connection. Movable, not copyable; moving it must not overlap a call.
class STREAMQ_EXPORT StatsReader {
 public:
  /// Validates the options; connects lazily.
  explicit StatsReader(StatsOptions options = {});
  ~StatsReader();
  StatsReader(StatsReader&&) noexcept;
  StatsReader& operator=(StatsReader&&) noexcept;
  StatsReader(const StatsReader&) = delete;
  StatsReader& operator=(const StatsReader&) = delete;

  /// Takes a snapshot (of each partition in turn, and their sum, with StatsOptions::partitions
  /// > 1). Issues (pipelined) TIME, EXISTS, XINFO STREAM, XINFO GROUPS, XLEN and
  /// XINFO STREAM of the dead-letter stream, ZCARD and the first member of the delayed set, EXISTS, XINFO
  /// STREAM and XINFO GROUPS of the high and low priority streams, then XINFO CONSUMERS and an XPENDING per
  /// group (of the normal stream), then ZCARD and ZRANGE (the first 1,000) of the tenants' ready and
  /// waiting sets and, when those are all of them, three LLEN per tenant (QueueStats::backlog). All
  /// read-only.
  /// @throws ConnectionError / TimeoutError, ReplyError (e.g. WRONGTYPE, NOPERM).
  QueueStats read();

 private:
  struct STREAMQ_NO_EXPORT Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamq
