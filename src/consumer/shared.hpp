// SPDX-License-Identifier: MIT
// What every part of a running Consumer shares: the validated options, the queue's keys, the
// handlers, the in-flight set and the counters. Built once by the facade; handler threads
// hold it by shared_ptr, so a handler that outlives the shutdown grace period (its thread is
// then detached) never sees it destroyed under it. Immutable after run() started, except
// for the in-flight set, the counters and the stop source, which are thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <unordered_map>

#include "inflight.hpp"
#include "level_order.hpp"
#include "metrics.hpp"
#include "redis/connection.hpp"
#include "streamq/consumer.hpp"
#include "streamq/consumer_options.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

using Handler = std::function<void(const Task&)>;
using AsyncHandler = Consumer::AsyncHandler;
struct AsyncChannel;  // executor.hpp
class Watchdog;       // watchdog.hpp
class ProcessPool;    // process_pool.hpp

/// The keys of each level: the queue's keys with `stream` set to that level's stream.
inline std::vector<QueueKeys> level_keys(const std::string& stream) {
  const QueueKeys queue = queue_keys(stream);
  std::vector<QueueKeys> out(kLevels, queue);
  for (std::uint16_t l = 0; l < kLevels; ++l)
    out[l].stream = priority_stream(queue, static_cast<Priority>(l));
  return out;
}

/// A registered handler and its per-type options (Consumer::on).
struct Registration {
  Handler handler{};  // empty for an asynchronous one
  AsyncHandler async{};
  HandlerOptions options{};
  /// With HandlerOptions::max_in_flight: how many run now in this consumer (the partitions'
  /// copies of the registration share it).
  std::shared_ptr<std::atomic<int>> running{};
};

/// Whether the queue is paused, as last read by the pause watch. paused() is a lock-free read
/// (the fetcher asks before every read); the fetcher waits on the flag while it is set.
class PauseFlag {
 public:
  /// Records the flag; true when it changed.
  bool set(bool paused) {
    {
      std::lock_guard lock(mutex_);
      if (paused_.load(std::memory_order_relaxed) == paused) return false;
      paused_.store(paused, std::memory_order_relaxed);
    }
    cv_.notify_all();
    return true;
  }
  bool paused() const noexcept { return paused_.load(std::memory_order_relaxed); }
  /// Blocks while paused; false when `stop` was requested.
  bool wait_resumed(const std::stop_token& stop) {
    std::unique_lock lock(mutex_);
    return cv_.wait(lock, stop, [&] { return !paused_.load(std::memory_order_relaxed); });
  }

 private:
  std::mutex mutex_;
  std::condition_variable_any cv_;
  std::atomic<bool> paused_{false};
};

struct Shared {
  /// `validated_options` of one partition (its stream is the partition's; see Consumer), `queue`
  /// the queue's name (ConsumerOptions::stream), `counters` shared by every partition, `name`
  /// the consumer's name until the name lock chooses another (see consumer_name).
  Shared(ConsumerOptions validated_options, std::string queue_name, std::shared_ptr<Metrics> counters,
         std::string name)
      : opt(std::move(validated_options)),
        queue(std::move(queue_name)),
        consumer_name(std::move(name)),
        connection(make_connection_config(opt.connection, "consumer", opt.stream)),
        streams(level_keys(opt.stream)),
        limits{opt.max_payload_bytes, opt.max_payload_depth, opt.default_max_retries},
        metrics_owner(std::move(counters)),
        metrics(*metrics_owner),
        inflight(static_cast<std::size_t>(opt.prefetch), metrics, opt.priority_weights.empty(),
                 opt.max_deliveries) {}

  const ConsumerOptions opt;
  /// The queue's name, for what the whole queue shares across partitions (rate limits).
  const std::string queue;
  /// The consumer's name in the group: opt.consumer_name, or, when that is empty, the one the
  /// name lock chose at start (NameLock::claim). Written only by run() before the engines'
  /// threads start; read-only after that.
  std::string consumer_name;
  const ConnectionConfig connection;
  /// The streams this consumer reads, one per priority level (index = level_index(): high,
  /// normal, low); an EntryKey's `stream` indexes it. Each element's `stream` is its level's
  /// stream; every other key (dlq, delayed, orphans, forwarder, ...) is the queue's own, the
  /// same in each, derived from the normal stream's name.
  const std::vector<QueueKeys> streams;
  const DecodeLimits limits;
  std::unordered_map<std::string, Registration> handlers;
  Handler fallback;
  std::vector<Middleware> middleware;  // Consumer::use, outermost first

  std::shared_ptr<Metrics> metrics_owner;
  Metrics& metrics;
  InFlight inflight;
  /// Requested when the consumer starts to stop (InFlight::stop() asks each running task).
  std::stop_source stopping;
  /// Time limits of running tasks (set by the facade; see watchdog.hpp).
  std::shared_ptr<Watchdog> watchdog;
  /// The process executor's children (process_pool.hpp), one pool for every partition; set
  /// before the engines start when a handler uses HandlerExecutor::process.
  std::shared_ptr<ProcessPool> pool;
  /// The connection asynchronous handlers' attempts share (set by the executor's start).
  std::shared_ptr<AsyncChannel> async_channel;
  /// Tells this partition's flow courier that an end of a flow's child
  /// was just written to the outbox (set by the consumer before its engines start; called by
  /// the completer, after the write).
  std::function<void()> wake_courier;
  /// The queue's pause flag (see PauseWatch), and whether the ACL user may not read it.
  PauseFlag pause;
  std::atomic<bool> pause_unreadable{false};
  /// Until when (steady clock, ns) acknowledgements go without MULTI: set a second ahead each
  /// time one's MULTI is refused for OOM (a server over maxmemory refuses every command queued
  /// in a MULTI, but takes plain XACK and XDEL, which free the memory). See append_acks.
  std::atomic<std::int64_t> acks_without_multi_until{0};
  /// Whether that was logged (cleared, and logged, when a MULTI goes through again).
  std::atomic<bool> acks_oom_logged{false};

  /// The keys of level `stream`; by default the normal level's, i.e. the queue's own keys.
  const QueueKeys& keys(std::uint16_t stream = kNormalLevel) const { return streams[stream]; }
  std::uint16_t stream_count() const noexcept { return static_cast<std::uint16_t>(streams.size()); }
};

/// Counts a connection re-established after a loss (its first connect is no reconnect).
inline void count_reconnect(const Connection& conn, Metrics& m) {
  if (conn.generation() > 1) Metrics::add(m.reconnects, 1);
}

}  // namespace streamq::detail
