// SPDX-License-Identifier: MIT
#include "options.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "streamq/errors.hpp"
#include "util/durations.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "host";
  return host;
}

std::string unique_consumer_name() {
  std::random_device rd;
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return host_name() + "-" + std::to_string(getpid()) + "-" + suffix;
}

ConsumerOptions validated(ConsumerOptions o) {
  using std::chrono::milliseconds;
  if (o.stream.empty()) throw ConfigError("stream must not be empty");
  if (o.group.empty()) throw ConfigError("group must not be empty");
  if (o.concurrency < 1) throw ConfigError("concurrency must be >= 1");
  if (o.prefetch < o.concurrency) throw ConfigError("prefetch must be >= concurrency");
  check_partitions(o.partitions, o.stream);
  if (o.concurrency < o.partitions) {
    throw ConfigError("concurrency must be >= partitions (each partition gets a handler thread at least)");
  }
  if (!o.priority_weights.empty()) {
    if (o.priority_weights.size() != 3) {
      throw ConfigError(
          "priority_weights must be empty (strict order) or hold 3 weights (high, normal, low)");
    }
    for (const int w : o.priority_weights) {
      // 0 would starve its level; the bound keeps the arithmetic of the shares exact.
      if (w < 1 || w > 1000) throw ConfigError("priority_weights must each be 1 to 1000");
    }
  }
  check_duration(o.block, milliseconds(1), "block");
  if (o.connection.socket_timeout < o.block + milliseconds(1000)) {
    // A socket timeout shorter than BLOCK fails the read while the server keeps the client
    // blocked: an entry added then is delivered to a reader that is gone ("phantom delivery").
    throw ConfigError("connection.socket_timeout must be >= block + 1000 ms");
  }
  check_duration(o.heartbeat_interval, milliseconds(1), "heartbeat_interval");
  check_duration(o.claim_min_idle, milliseconds(0), "claim_min_idle");
  if (o.claim_min_idle < 3 * o.heartbeat_interval) {
    throw ConfigError("claim_min_idle must be >= 3 * heartbeat_interval");
  }
  check_duration(o.reclaim_interval, milliseconds(1), "reclaim_interval");
  // 2 at least: every entry a crashed worker held is charged its one delivery, started or not.
  if (o.max_deliveries < 2) throw ConfigError("max_deliveries must be >= 2");
  check_duration(o.shutdown_grace, milliseconds(0), "shutdown_grace");
  if (o.max_payload_bytes == 0) throw ConfigError("max_payload_bytes must be > 0");
  if (o.max_payload_depth < 1) throw ConfigError("max_payload_depth must be >= 1");
  if (o.default_max_retries < 0) throw ConfigError("default_max_retries must be >= 0");
  check_duration(o.idle_consumer_timeout, milliseconds(0), "idle_consumer_timeout");
  if (o.idle_consumer_timeout.count() > 0 && o.idle_consumer_timeout < o.claim_min_idle) {
    // A consumer idle for less than claim_min_idle may be a live one between two reads.
    throw ConfigError("idle_consumer_timeout must be 0 (off) or >= claim_min_idle");
  }
  check_backoff(o.retry_backoff, "retry_backoff");
  check_duration(o.forward_interval, milliseconds(1), "forward_interval");
  check_duration(o.pause_check_interval, milliseconds(1), "pause_check_interval");
  check_duration(o.timeout_grace, milliseconds(1), "timeout_grace");
  if (o.concurrency_limit.limit < 0) throw ConfigError("concurrency_limit.limit must be >= 0");
  return o;
}

void check_backoff(const RetryBackoff& b, const std::string& name) {
  check_duration(b.base, std::chrono::milliseconds(0), name + ".base");
  check_duration(b.cap, std::chrono::milliseconds(0), name + ".cap");
  if (b.cap < b.base) throw ConfigError(name + ".cap must be >= " + name + ".base");
  if (!(b.factor >= 1.0) || !std::isfinite(b.factor))
    throw ConfigError(name + ".factor must be >= 1 and finite");
}

void check_handler_options(const HandlerOptions& h) {
  if (h.retry_backoff) check_backoff(*h.retry_backoff, "retry_backoff");
  if (h.rate.limit < 0) throw ConfigError("rate.limit must be >= 0");
  if (h.rate.limit > 0) check_duration(h.rate.per, std::chrono::milliseconds(1), "rate.per");
  check_duration(h.timeout, std::chrono::milliseconds(0), "timeout");
  if (h.concurrency.limit < 0) throw ConfigError("concurrency.limit must be >= 0");
  if (h.max_in_flight < 0) throw ConfigError("max_in_flight must be >= 0");
  if (h.executor != HandlerExecutor::thread && h.executor != HandlerExecutor::process) {
    throw ConfigError("executor must be HandlerExecutor::thread or HandlerExecutor::process");
  }
  if (h.limits.cpu.count() < 0) throw ConfigError("limits.cpu must be >= 0");
  if (h.limits.tasks_per_child < 1) throw ConfigError("limits.tasks_per_child must be >= 1");
  const ProcessLimits none{};
  if (h.executor == HandlerExecutor::thread &&
      (h.limits.cpu.count() > 0 || h.limits.address_space > 0 ||
       h.limits.tasks_per_child != none.tasks_per_child || h.limits.memory_per_child > 0)) {
    throw ConfigError(
        "limits need executor = HandlerExecutor::process (a thread's memory and CPU cannot be bounded)");
  }
}

}  // namespace streamq::detail
