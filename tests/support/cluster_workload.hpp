// SPDX-License-Identifier: MIT
// What the tests of queues on a Redis Cluster share: worker options, queue names whose
// slots a chosen node serves, the streams of a queue and the tasks left in them, a log of the
// runs of each task, and a producer thread that enqueues numbered tasks and sends a refused one
// again.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <streamq/streamq.hpp>

#include "failover_workers.hpp"
#include "redis/cluster.hpp"
#include "redis_server.hpp"
#include "wire/keys.hpp"

namespace streamq::test {

using namespace std::chrono_literals;

inline ConsumerOptions cluster_worker_options(const std::string& url, const std::string& stream,
                                              const std::string& name) {
  return failover_worker_options(url, stream, name, 2s);
}

/// A queue name (with a hash tag) whose slot node `owner` of `t` serves.
inline std::string stream_on(ClusterTopology& t, int owner, std::string base) {
  std::erase(base, '{');  // unique_key() has a hash tag of its own
  std::erase(base, '}');
  for (int i = 0; i < 1000; ++i) {
    const std::string name = "{" + base + "-" + std::to_string(i) + "}";
    if (t.owner_of(detail::key_slot(name)) == owner) return name;
  }
  throw std::runtime_error("no name found for the node");
}

/// unique_key() without its braces: the base name of a partitioned queue.
inline std::string plain_key(std::string_view suffix = "q") {
  std::string k = unique_key(suffix);
  std::erase(k, '{');
  std::erase(k, '}');
  return k;
}

/// A partitioned queue's base name for which `fits(name)` holds.
inline std::string partitioned_name(const std::function<bool(const std::string&)>& fits) {
  const std::string base = plain_key();
  for (int i = 0; i < 1000; ++i) {
    const std::string name = base + "-" + std::to_string(i);
    if (fits(name)) return name;
  }
  throw std::runtime_error("no partitioned queue name fits");
}

/// The streams of queue `queue` of `partitions` partitions (the queue itself when 1).
inline std::vector<std::string> queue_streams(const std::string& queue, int partitions) {
  if (partitions == 1) return {queue};
  std::vector<std::string> out;
  for (int i = 0; i < partitions; ++i) out.push_back(detail::partition_stream(queue, partitions, i));
  return out;
}

/// Tasks queued or pending (group "workers") in `streams`, each read on the master serving it now.
inline std::int64_t left_in(ClusterTopology& t, const std::vector<std::string>& streams) {
  std::int64_t n = 0;
  for (const std::string& stream : streams) {
    Client master(t.node(t.owner_of(detail::key_slot(stream))).url());
    const detail::Reply pel = master.cmd({"XPENDING", stream, "workers"});
    n += master.integer({"XLEN", stream}) + pel.view()[0].integer();
  }
  return n;
}

/// Runs of each task id, recorded by the handlers of a test's workers.
struct RunLog {
  std::mutex m;
  std::map<std::string, int> runs;
  void add(const std::string& id) {
    std::lock_guard lock(m);
    ++runs[id];
  }
  /// Acknowledged ids never run, and ids run more than once.
  std::pair<std::size_t, std::size_t> lost_and_duplicated(const std::set<std::string>& acknowledged) {
    std::lock_guard lock(m);
    std::size_t lost = 0;
    std::size_t duplicated = 0;
    for (const std::string& id : acknowledged) lost += runs.contains(id) ? 0 : 1;
    for (const auto& [id, n] : runs) duplicated += n > 1 ? 1 : 0;
    return {lost, duplicated};
  }
};

/// A producer thread: numbered tasks, one a millisecond or so; a refused one (MOVED, ASK,
/// TRYAGAIN, CLUSTERDOWN, a lost connection, too few replicas) is sent again with the same id.
class SteadyProducer {
 public:
  explicit SteadyProducer(ProducerOptions options, std::string id_prefix = "n") {
    thread_ = std::jthread([this, options, id_prefix](const std::stop_token& stop) {
      Producer producer(options);
      for (int i = 0; !stop.stop_requested(); ++i) {
        const std::string id = id_prefix + std::to_string(i);
        for (;;) {
          try {
            producer.enqueue("n", "{}", {.task_id = id});
            std::lock_guard lock(m_);
            acknowledged_.insert(id);
            if (mark_) after_mark_.insert(id);
            break;
          } catch (const std::exception& e) {
            refusals_ += 1;
            {
              std::lock_guard lock(m_);
              last_refusal_ = e.what();
            }
            if (stop.stop_requested()) break;
            std::this_thread::sleep_for(20ms);
          }
        }
        std::this_thread::sleep_for(1ms);
      }
    });
  }
  /// Tasks acknowledged from now on are counted in after_mark().
  void mark() {
    std::lock_guard lock(m_);
    mark_ = true;
  }
  std::size_t acknowledged_count() {
    std::lock_guard lock(m_);
    return acknowledged_.size();
  }
  std::size_t after_mark() {
    std::lock_guard lock(m_);
    return after_mark_.size();
  }
  void stop() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
  }
  const std::set<std::string>& acknowledged() const { return acknowledged_; }  // after stop()
  const std::set<std::string>& acknowledged_after_mark() const { return after_mark_; }
  std::int64_t refusals() const { return refusals_; }
  std::string last_refusal() {
    std::lock_guard lock(m_);
    return last_refusal_;
  }

 private:
  std::mutex m_;
  bool mark_ = false;
  std::set<std::string> acknowledged_;
  std::set<std::string> after_mark_;
  std::atomic<std::int64_t> refusals_{0};
  std::string last_refusal_;
  std::jthread thread_;
};

}  // namespace streamq::test
