// SPDX-License-Identifier: MIT
// With ProducerOptions::min_replicas_acked: WAIT for the replicas to acknowledge what was
// written, and what they acknowledged, for a ReplicationError or a refused batch's message.
#include <algorithm>

#include "producer_impl.hpp"
#include "streamq/errors.hpp"

namespace streamq {

std::int64_t Producer::Impl::replicas_acknowledging() {
  detail::Argv wait{"WAIT"};
  wait.add(static_cast<std::int64_t>(options.min_replicas_acked));
  wait.add(static_cast<std::int64_t>(options.replicas_ack_timeout.count()));
  std::int64_t fewest = options.min_replicas_acked;
  for (const detail::Reply& reply : conn.wait_where_sent(wait)) {
    if (reply.view().is_error() &&
        (conn.config().endpoint.is_sentinel() || conn.config().endpoint.is_cluster()) &&
        detail::is_demotion_error(reply.view().error())) {
      return 0;
    }
    fewest = std::min(fewest, reply.view().check().integer());
  }
  return fewest;
}

std::string Producer::Impl::replication_of_written(const std::vector<std::string>& ids) {
  if (options.min_replicas_acked == 0 ||
      std::all_of(ids.begin(), ids.end(), [](const auto& id) { return id.empty(); })) {
    return {};
  }
  const std::int64_t acked = replicas_acknowledging();
  return "; the tasks written were acknowledged by " + std::to_string(acked) + " of the " +
         std::to_string(options.min_replicas_acked) + " replicas asked for" +
         (acked < options.min_replicas_acked ? " (lost if the master fails now)" : "");
}

void Producer::Impl::wait_for_replicas(const std::vector<std::string>& ids) {
  if (options.min_replicas_acked == 0) return;
  const std::int64_t acked = replicas_acknowledging();
  if (acked >= options.min_replicas_acked) return;
  throw ReplicationError(
      std::to_string(ids.size()) + (ids.size() == 1 ? " task (" + ids[0] + ")" : " tasks") +
          " written to the master of " + options.stream + ", but only " + std::to_string(acked) + " of the " +
          std::to_string(options.min_replicas_acked) + " replicas asked for acknowledged within " +
          std::to_string(options.replicas_ack_timeout.count()) +
          " ms: queued, and lost only if the master fails before a replica copies them",
      ids, acked, options.min_replicas_acked);
}

}  // namespace streamq
