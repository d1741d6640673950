// SPDX-License-Identifier: MIT
#include "schedule_queue.hpp"

#include <algorithm>
#include <utility>

namespace streamq::cli {

int partitions_of(const QueueInfo& queue) {
  const auto n = std::count_if(queue.partitions.begin(), queue.partitions.end(),
                               [&](const std::string& p) { return p != queue.name; });
  return n > 0 ? static_cast<int>(n) : 1;
}

int find_partitions(Inspector& in, const std::string& queue) {
  for (const QueueInfo& q : in.queues()) {
    if (q.name == queue) return partitions_of(q);
  }
  return 1;
}

Schedules queue_schedules(const ConnectionOptions& connection, const std::string& queue, int partitions,
                          std::function<std::chrono::system_clock::time_point()> clock) {
  return Schedules({.connection = connection, .stream = queue, .partitions = partitions}, std::move(clock));
}

}  // namespace streamq::cli
