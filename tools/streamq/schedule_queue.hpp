// SPDX-License-Identifier: MIT
// The queue whose stored schedules (streamq::Schedules) the schedules command, the dashboard and
// the exporter read: Schedules needs the queue's partition count (its records sit in the partition
// each name chooses), which is found here as `streamq queues` finds it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <streamq/inspector.hpp>
#include <streamq/schedules.hpp>

namespace streamq::cli {

/// The partitions of a queue as Inspector::queues() lists it: its `{<name>:i}` streams (not the
/// stream `name` itself, a queue of one stream that the partitions replaced); 1 for a queue of one stream.
int partitions_of(const QueueInfo& queue);

/// The partitions of `queue`, from Inspector::queues() (a SCAN of the database); 1 when no queue
/// of that name is found (no stream of it exists yet).
int find_partitions(Inspector& in, const std::string& queue);

/// The stored schedules of `queue`, `partitions` of it, through `connection`; `clock` as Schedules takes it.
Schedules queue_schedules(const ConnectionOptions& connection, const std::string& queue, int partitions,
                          std::function<std::chrono::system_clock::time_point()> clock = {});

/// ms since the Unix epoch.
inline std::int64_t unix_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace streamq::cli
