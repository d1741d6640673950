// SPDX-License-Identifier: MIT
// Test support: the options of a worker in a failover test (Sentinel, Cluster).
#pragma once

#include <chrono>
#include <string>

#include <streamq/consumer.hpp>

namespace streamq::test {

/// A worker that notices a failover and takes over stalled entries within a few seconds:
/// short blocks, leases and reclaim, and reconnects capped at 300 ms (the default cap, 30 s,
/// would leave it waiting long after the failover is over). No signal handlers.
inline ConsumerOptions failover_worker_options(const std::string& url, const std::string& stream,
                                               const std::string& name,
                                               std::chrono::milliseconds claim_min_idle) {
  using namespace std::chrono_literals;
  ConsumerOptions o;
  o.connection = {.url = url, .socket_timeout = 3s, .backoff_max = 300ms};
  o.stream = stream;
  o.group = "workers";
  o.consumer_name = name;
  o.block = 200ms;
  o.claim_min_idle = claim_min_idle;
  o.reclaim_interval = 200ms;
  o.heartbeat_interval = 200ms;
  o.stop_on_signals = false;
  return o;
}

}  // namespace streamq::test
