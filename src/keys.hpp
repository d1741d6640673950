// SPDX-License-Identifier: MIT
// Every Redis key of a queue is derived here from the stream name, so `{orders}` keeps all
// of a queue's keys in one Redis Cluster slot.
#pragma once

#include <string>
#include <string_view>

namespace streamq::detail {

struct QueueKeys {
  std::string stream;   // the task stream itself
  std::string dlq;      // dead-letter stream
  std::string delayed;  // sorted set of delayed tasks (score = due time)
  std::string orphans;  // hash: entry id -> its provisional dead-letter record (body deleted while held)
};

/// The refusal mark of one multi-chunk enqueue_batch (see the enqueue script): `token` is
/// unique per batch. Short-lived: it expires a minute after its last use.
inline std::string batch_refused_key(std::string_view stream, std::string_view token) {
  return std::string(stream) + ":batch:" + std::string(token) + ":refused";
}

/// The record of periodic task `name` (see the schedule_tick script): the newest tick handled.
inline std::string schedule_key(std::string_view stream, std::string_view name) {
  return std::string(stream) + ":sched:" + std::string(name);
}

inline QueueKeys queue_keys(std::string_view stream) {
  const std::string s(stream);
  return QueueKeys{s, s + ":dlq", s + ":delayed", s + ":orphans"};
}

}  // namespace streamq::detail
