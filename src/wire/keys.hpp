// SPDX-License-Identifier: MIT
// Every Redis key of a queue is derived here from the stream name, so `{orders}` keeps all
// of a queue's keys in one Redis Cluster slot.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "streamq/common.hpp"
#include "streamq/errors.hpp"
#include "util/concat.hpp"

namespace streamq::detail {

struct QueueKeys {
  std::string stream;     // the task stream itself: normal priority, as the seed uses it
  std::string dlq;        // dead-letter stream
  std::string delayed;    // sorted set of delayed tasks (score = due time in ms, member = the task)
  std::string high;       // the high-priority sibling stream
  std::string low;        // the low-priority sibling stream
  std::string forwarder;  // the forwarder lease: which consumer polls the delayed set often
  std::string paused;     // the pause flag (Inspector::pause): workers take no new tasks while it exists
  // A partitioned queue's flows across partitions (src/consumer/flow_courier.hpp), out of the
  // way of a flow's own keys (<stream>:flow:<parent id>...):
  std::string outbox;   // a stream: the ends of this partition's children, for their parents' partitions
  std::string placing;  // a hash: the children this partition's flows place in other partitions
};

/// A placement of a flow's children waits this long in its home's hash before a courier makes
/// it (the producer that wrote the flow makes it at once, and takes it out of the hash).
inline constexpr std::int64_t kPlacementGraceMs = 30000;
/// How long a placement's guard stays once its producer took it out of the hash (a courier
/// that read it before then may still try it, and a failover may lose that deletion: the
/// placement is back in the hash then); otherwise a day (PLACED_KEEP in enqueue.lua).
inline constexpr std::string_view kPlacedGuardAfterMs = "3600000";

/// The guard of one placement of a flow's children into partition `stream` (enqueue.lua,
/// 'placed'): set when it is made, so it is made once.
inline std::string placed_key(std::string_view stream, std::string_view token) {
  return std::string(stream) + ":flows:placed:" + std::string(token);
}

/// The mark of one multi-chunk enqueue_batch (see the enqueue script): 'refused', or the place
/// of the last chunk written, so no chunk writes after one that was refused or not run.
/// `token` is unique per batch. Short-lived: it expires a minute after its last use.
inline std::string batch_refused_key(std::string_view stream, std::string_view token) {
  return std::string(stream) + ":batch:" + std::string(token) + ":refused";
}

/// The uniqueness lock of `key` (EnqueueOptions::unique_for): holds the task id.
inline std::string unique_lock_key(std::string_view stream, std::string_view key) {
  return std::string(stream) + ":unique:" + std::string(key);
}

/// The state of debounce key `key` (EnqueueOptions::debounce): a hash of the waiting task's
/// `id` and its `member` of the delayed set, expiring at the task's due time.
inline std::string debounce_key(std::string_view stream, std::string_view key) {
  return std::string(stream) + ":debounce:" + std::string(key);
}

/// The liveness key of `consumer` in `group` (src/consumer/name_lock.hpp): which process runs
/// that consumer name. The group's length keeps group "a:b" with consumer "c" apart from group
/// "a" with consumer "b:c".
inline std::string live_key(std::string_view stream, std::string_view group, std::string_view consumer) {
  return std::string(stream) + ":live:" + std::to_string(group.size()) + ":" + std::string(group) + ":" +
         std::string(consumer);
}

/// The note of the dead-letter record written for entry `id` of `level_stream` (one priority
/// level's stream) when its body was deleted while a consumer held it (src/lua/orphan.lua):
/// holds the record's id, and expires after claim_min_idle unless the holder, still running
/// the task, renews it (its own completion then replaces the record). Keyed by the level's
/// stream and the id, because entry ids are unique only within one stream.
inline std::string orphan_key(std::string_view level_stream, std::string_view id) {
  return std::string(level_stream) + ":orphan:" + std::string(id);
}

// `orphan_key()` + ":settled": set (for a day) by settle_orphans.lua when it made entry `id`'s
// provisional record its task's fate, holding the record's id, so that a holder that was only
// cut off settles nothing a second time when it comes back (src/lua/lib/settled.lua). A key of
// its own, not the note: the holder's renewals of the note must not touch it.

/// The provisional dead-letter records of `level_stream`'s entries (orphan.lua): a sorted set
/// of `<entry id> <record id>`, scored by when the record was written (or last found still
/// noted), ms. settle_orphans.lua ends the task of a record whose note expired (its holder is
/// gone). Named under `:orphan:` with the notes (no entry id is "provisional"), so the roles'
/// key patterns that cover the notes cover it.
inline std::string orphans_key(std::string_view level_stream) {
  return std::string(level_stream) + ":orphan:provisional";
}

/// The state record of tracked task `task_id` (lib/record.lua): a hash in the queue's slot.
inline std::string task_key(std::string_view stream, std::string_view task_id) {
  return std::string(stream) + ":task:" + std::string(task_id);
}

/// The flow of parent `task_id` (Producer::enqueue_flow, lib/flows.lua): a hash (its body and
/// its children's order), with `<flow>:pending` (a set) and `<flow>:results` (a hash).
inline std::string flow_key(std::string_view stream, std::string_view task_id) {
  return std::string(stream) + ":flow:" + std::string(task_id);
}

/// Batch `batch_id` (Producer::open_batch, lib/batches.lua): a hash (state, counts, callbacks),
/// with `<batch>:pending` (a set of its unfinished members).
inline std::string batch_key(std::string_view stream, std::string_view batch_id) {
  return std::string(stream) + ":batches:" + std::string(batch_id);
}

/// The queue's events stream (the changes of its tracked tasks, capped at about 10,000).
inline std::string events_key(std::string_view stream) { return std::string(stream) + ":events"; }

/// The sliding window of one task type's rate limit (HandlerOptions::rate).
inline std::string rate_key(std::string_view stream, std::string_view task_type) {
  return std::string(stream) + ":rate:" + std::string(task_type);
}

/// The semaphore of a concurrency limit (ConcurrencyLimit): of the whole queue (`task_type`
/// empty) or of one task type.
inline std::string running_key(std::string_view stream, std::string_view task_type = {}) {
  return concat(stream, ":running", task_type.empty() ? "" : ":", task_type);
}

/// An operator's request to stop running entry `id` of `level_stream` (src/lua/cancel.lua).
inline std::string cancel_key(std::string_view level_stream, std::string_view id) {
  return std::string(level_stream) + ":cancel:" + std::string(id);
}

/// Where cancel.lua pushes the ids of the held entries of `level_stream` an operator cancels
/// (a short stream every consumer follows: src/consumer/cancel_follower.hpp).
inline std::string cancels_key(std::string_view level_stream) {
  return std::string(level_stream) + ":cancels";
}

/// The record of periodic task `name` (see the schedule_tick script): the newest tick handled.
inline std::string schedule_key(std::string_view stream, std::string_view name) {
  return std::string(stream) + ":sched:" + std::string(name);
}

inline QueueKeys queue_keys(std::string_view stream) {
  const std::string s(stream);
  return QueueKeys{s,
                   s + ":dlq",
                   s + ":delayed",
                   s + ":p:high",
                   s + ":p:low",
                   s + ":forwarder",
                   s + ":paused",
                   s + ":flows:outbox",
                   s + ":flows:placing"};
}

/// Longest tenant name (EnqueueOptions::tenant).
inline constexpr std::size_t kMaxTenantBytes = 256;

/// ConfigError unless `tenant` is 1 to kMaxTenantBytes bytes without NUL.
inline void check_tenant_name(std::string_view tenant) {
  if (tenant.empty() || tenant.size() > kMaxTenantBytes || tenant.find('\0') != std::string_view::npos) {
    throw ConfigError("tenant must be 1 to " + std::to_string(kMaxTenantBytes) + " bytes, without NUL");
  }
}

/// The keys of tenant `tenant` of queue (or partition) `stream` that hold its settings: its own
/// (a hash, see src/lua/lib/tenants.lua), and every tenant's defaults.
inline std::string tenant_config_key(std::string_view stream, std::string_view tenant) {
  return std::string(stream) + ":tenants:config:" + std::string(tenant);
}
inline std::string tenant_defaults_key(std::string_view stream) {
  return std::string(stream) + ":tenants:defaults";
}

/// The sets of queue (or partition) `stream`'s tenants that have a backlog: those that may run
/// now (by pass), and those that wait (by when to look again). See src/lua/lib/tenants.lua.
inline std::string tenants_ready_key(std::string_view stream) {
  return std::string(stream) + ":tenants:ready";
}
inline std::string tenants_waiting_key(std::string_view stream) {
  return std::string(stream) + ":tenants:waiting";
}
/// Tenant `tenant`'s backlog of level `level` (a list), the suffixes of the level streams'.
inline std::string tenant_backlog_key(std::string_view stream, std::string_view tenant, Priority level) {
  std::string key = std::string(stream) + ":tenant:" + std::string(tenant);
  if (level == Priority::high) key += ":p:high";
  if (level == Priority::low) key += ":p:low";
  return key;
}

/// Most partitions a queue may have (ProducerOptions::partitions, ...).
inline constexpr int kMaxPartitions = 1024;

/// The stream without '{' and '}': what a partition's hash tag is made of.
inline std::string partition_base(std::string_view stream) {
  std::string base;
  for (const char c : stream) {
    if (c != '{' && c != '}') base.push_back(c);
  }
  return base;
}

/// ConfigError unless 1 <= partitions <= kMaxPartitions, and a partitioned queue's name has
/// something besides braces.
inline void check_partitions(int partitions, std::string_view stream) {
  if (partitions < 1 || partitions > kMaxPartitions) {
    throw ConfigError("partitions must be 1 to " + std::to_string(kMaxPartitions));
  }
  if (partitions > 1 && partition_base(stream).empty()) {
    throw ConfigError("stream \"" + std::string(stream) + "\" has nothing but braces to name its partitions");
  }
}

/// The stream of partition `i` (0-based) of a queue split into `partitions`: the stream itself
/// when there is one partition (today's queue, the seed's name); otherwise
/// `{<stream without braces>:<i>}`, a name that is its own hash tag, so that each partition
/// (with every key derived from it) sits in a slot of its own on Redis Cluster.
inline std::string partition_stream(std::string_view stream, int partitions, int i) {
  if (partitions <= 1) return std::string(stream);
  return concat("{", partition_base(stream), ":", std::to_string(i), "}");
}

/// Whether `stream` is one of the partitions of queue `queue` (`{<base>:<i>}`, any i).
inline bool is_partition_of(std::string_view queue, std::string_view stream) {
  const std::string prefix = concat("{", partition_base(queue), ":");
  if (stream.size() <= prefix.size() + 1 || !stream.starts_with(prefix) || !stream.ends_with('}'))
    return false;
  const std::string_view index = stream.substr(prefix.size(), stream.size() - prefix.size() - 1);
  for (const char c : index) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

/// A queue's name in one form (a flow across queues compares them): a partitioned queue's
/// without its braces (`{gpu}` and `gpu` of P partitions are the same queue: `{gpu:i}`), else
/// as given.
inline std::string queue_name(std::string_view stream, int partitions) {
  return partitions > 1 ? partition_base(stream) : std::string(stream);
}

/// The priority levels: a level's index is its Priority's value (0 high, 1 normal: the queue's
/// stream, 2 low).
inline constexpr std::uint16_t kLevels = 3;
/// The levels, most important first (the order every walk over them takes).
inline constexpr std::array<Priority, kLevels> kPriorities{Priority::high, Priority::normal, Priority::low};

/// The stream of a priority level.
inline const std::string& priority_stream(const QueueKeys& keys, Priority p) {
  switch (p) {
    case Priority::high: return keys.high;
    case Priority::low: return keys.low;
    case Priority::normal: break;
  }
  return keys.stream;
}

}  // namespace streamq::detail
