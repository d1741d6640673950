// SPDX-License-Identifier: MIT
// A master of a Redis Cluster killed with SIGKILL mid-run, under a queue of one stream and
// under a partitioned queue over every master, with and without min_replicas_acked: what is lost
// (nothing with a replica's acknowledgement, nothing written to the new master), what runs
// twice, and how long the failover takes.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "cluster_workload.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

// What a kill -9 of a master costs, with and without min_replicas_acked = 1, when its replica
// has been cut off for the last 300 ms and the workers were stuck meanwhile (as the sentinel
// test does it). The replica takes over (cluster-node-timeout 1 s); the killed master comes
// back empty and the cluster makes it a replica of the new master.
class ClusterFailover : public ::testing::TestWithParam<int> {};

struct KillSetup {
  std::string queue;   // the stream, or a partitioned queue's base name
  int partitions = 1;  // 1: `queue` is one stream, served by master 0
  int workers = 2;
  int producers = 1;
  int acks = 0;  // min_replicas_acked
};

/// Runs `s` on `t` (3 masters, a replica each: node 3 is master 0's) and kills master 0 mid-run.
void kill_master_zero_mid_run(ClusterTopology& t, const KillSetup& s) {
  const std::string url = t.url();
  const std::vector<std::string> streams = queue_streams(s.queue, s.partitions);
  std::vector<int> slots_of_zero;  // the queue's slots that master 0 serves
  for (const std::string& stream : streams) {
    if (t.owner_of(detail::key_slot(stream)) == 0) slots_of_zero.push_back(detail::key_slot(stream));
  }
  ASSERT_FALSE(slots_of_zero.empty()) << "no stream of the queue is on master 0";

  RunLog log;
  std::atomic<bool> hold{false};  // the workers are stuck (in a slow task, say)
  const auto handler = [&](Consumer& c) {
    c.on("n", [&](const Task& task) {
      while (hold) std::this_thread::sleep_for(1ms);
      log.add(task.id());
    });
  };
  std::vector<std::unique_ptr<RunningConsumer>> workers;
  for (int i = 0; i < s.workers; ++i) {
    auto o = cluster_worker_options(url, s.queue, "w" + std::to_string(i + 1));
    o.partitions = s.partitions;
    o.concurrency = o.prefetch = s.partitions;  // one handler thread per partition
    workers.push_back(std::make_unique<RunningConsumer>(o, handler));
  }
  ProducerOptions po{.connection = {.url = url, .socket_timeout = 3s, .backoff_max = 300ms},
                     .stream = s.queue,
                     .partitions = s.partitions};
  po.max_len = 1'000'000;
  if (s.acks > 0) {
    po.min_replicas_acked = s.acks;
    po.replicas_ack_timeout = 500ms;
  }
  std::vector<std::unique_ptr<SteadyProducer>> producers;
  for (int i = 0; i < s.producers; ++i) {
    producers.push_back(std::make_unique<SteadyProducer>(po, "p" + std::to_string(i) + "-"));
  }
  const auto each_producer = [&](const auto& f) {
    for (const auto& p : producers) f(*p);
  };

  std::this_thread::sleep_for(700ms);
  hold = true;
  const std::unique_ptr<std::atomic<bool>, void (*)(std::atomic<bool>*)> release(
      &hold, [](std::atomic<bool>* h) { *h = false; });
  Client old_master(t.node(0).url());
  old_master.cmd({"CONFIG", "SET", "requirepass", "partitioned"}).view().check();
  old_master.cmd({"CLIENT", "KILL", "TYPE", "replica"}).view().check();
  std::this_thread::sleep_for(300ms);
  t.node(0).kill9();
  hold = false;
  const auto killed_at = std::chrono::steady_clock::now();
  const auto acknowledged_so_far = [&] {
    std::size_t n = 0;
    each_producer([&](SteadyProducer& p) { n += p.acknowledged_count(); });
    return n;
  };
  const std::size_t at_kill = acknowledged_so_far();
  for (const int slot : slots_of_zero) {
    ASSERT_TRUE(wait_until([&] { return t.owner_of(slot) == 3; }, 30s)) << "no failover";
    ASSERT_TRUE(t.wait_until_ok(slot));
  }
  const auto failover_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at)
          .count();
  const std::size_t during_failover = acknowledged_so_far() - at_kill;
  each_producer([](SteadyProducer& p) { p.mark(); });
  // Empty, as a host that lost its disk: the cluster makes it a replica of the new master.
  t.node(0).restart();
  const bool followed = wait_until(
      [&] {
        bool all = true;
        each_producer([&](SteadyProducer& p) { all = all && p.after_mark() >= 200; });
        return all;
      },
      30s);
  each_producer([](SteadyProducer& p) { p.stop(); });
  // Until the restarted node agrees, it may still claim the slots it had (and answer
  // CLUSTERDOWN): left_in() asks the owner the first live node names.
  for (const int slot : slots_of_zero) ASSERT_TRUE(t.wait_until_ok(slot));

  const auto left = [&] { return left_in(t, streams); };
  ASSERT_TRUE(wait_until([&] { return left() == 0; }, 30s)) << left() << " tasks left behind";
  for (auto& w : workers) w->stop();

  std::set<std::string> acknowledged;
  std::set<std::string> after_mark;
  std::int64_t refusals = 0;
  std::string last_refusal;
  each_producer([&](SteadyProducer& p) {
    acknowledged.insert(p.acknowledged().begin(), p.acknowledged().end());
    after_mark.insert(p.acknowledged_after_mark().begin(), p.acknowledged_after_mark().end());
    refusals += p.refusals();
    if (!p.last_refusal().empty()) last_refusal = p.last_refusal();
  });
  const auto [lost, duplicated] = log.lost_and_duplicated(acknowledged);
  const auto [lost_after, unused] = log.lost_and_duplicated(after_mark);
  std::cout << "cluster failover, " << s.partitions << " partition(s), " << s.workers << " workers, "
            << s.producers << " producer(s), min_replicas_acked=" << s.acks << ": acknowledged "
            << acknowledged.size() << ", lost " << lost << ", run twice " << duplicated
            << ", left 0, refused attempts " << refusals << ", failover " << failover_ms
            << " ms, acknowledged during it " << during_failover << "\n";
  ::testing::Test::RecordProperty("lost", static_cast<int>(lost));
  ::testing::Test::RecordProperty("duplicated", static_cast<int>(duplicated));
  EXPECT_TRUE(followed) << "the producers did not follow the new master: " << last_refusal;
  EXPECT_EQ(lost_after, 0u);  // written to the new master: never lost
  if (s.acks > 0) {
    EXPECT_EQ(lost, 0u);  // acknowledged by the replica that took over
  } else {
    EXPECT_GT(lost, 0u) << "the master acknowledged nothing while its replica was cut off";
  }
}

// One queue (one stream) on master 0, one producer, two workers with one handler thread each.
TEST_P(ClusterFailover, KillOfTheQueuesMasterMidRun) {
  ClusterTopology t(3, 1);  // nodes 0-2 masters, 3-5 their replicas
  kill_master_zero_mid_run(t, {.queue = stream_on(t, 0, unique_key()), .acks = GetParam()});
}

// One queue of 6 partitions over the 3 masters, two producers, four workers: the kill of
// master 0 hits the partitions it serves; the others run on.
TEST_P(ClusterFailover, KillOfAMasterUnderAPartitionedQueue) {
  ClusterTopology t(3, 1);
  const std::string queue = partitioned_name([&](const std::string& name) {
    std::set<int> masters;
    for (const std::string& stream : queue_streams(name, 6))
      masters.insert(t.owner_of(detail::key_slot(stream)));
    return masters.size() == 3;
  });
  kill_master_zero_mid_run(
      t, {.queue = queue, .partitions = 6, .workers = 4, .producers = 2, .acks = GetParam()});
}

INSTANTIATE_TEST_SUITE_P(ReplicaAcks, ClusterFailover, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("Without") : std::string("WithOneReplica");
                         });

}  // namespace
}  // namespace streamq::test
