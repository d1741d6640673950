// SPDX-License-Identifier: MIT
// redis+cluster:// URLs on a private Redis Cluster: a queue runs on the master of its slot
// whichever node the URL names, a queue whose keys would span slots is refused, a server that is
// not a cluster node is a configuration mistake, and replica acknowledgements are asked of every
// master written to.
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
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

TEST(Cluster, AQueueRunsOnTheMasterOfItsSlotWhicheverNodeTheUrlNames) {
  ClusterTopology t(3);
  const std::string stream = stream_on(t, 2, unique_key());
  const std::string other = stream_on(t, 1, unique_key("other"));
  // The URL names only node 0, which serves neither queue.
  const std::string url = t.url({0});
  Producer producer({.connection = {.url = url}, .stream = stream});
  producer.enqueue("t", "{}", {.task_id = "one"});
  std::vector<TaskSpec> batch;
  for (int i = 0; i < 100; ++i)
    batch.push_back({.task_type = "t", .payload = "{}", .options = {.task_id = "b" + std::to_string(i)}});
  producer.enqueue_batch(batch);
  producer.enqueue("t", "{}", {.task_id = "later", .delay = 300ms});
  producer.enqueue("fails", "{}", {.task_id = "doomed", .max_retries = 1});
  Producer(ProducerOptions{.connection = {.url = url}, .stream = other}).enqueue("t", "{}");

  Client owner(t.node(2).url());
  Client node0(t.node(0).url());
  EXPECT_EQ(owner.integer({"XLEN", stream}), 102);
  EXPECT_EQ(owner.integer({"ZCARD", stream + ":delayed"}), 1);
  EXPECT_EQ(node0.integer({"DBSIZE"}), 0);

  std::mutex m;
  std::set<std::string> ran;
  {
    RunningConsumer rc(cluster_worker_options(url, stream, "w1"), [&](Consumer& c) {
      c.on("t", [&](const Task& task) {
        std::lock_guard lock(m);
        ran.insert(task.id());
      });
      c.on("fails", [](const Task&) { throw std::runtime_error("no"); });
    });
    ASSERT_TRUE(wait_until(
        [&] {
          std::lock_guard lock(m);
          return ran.size() == 102 && owner.integer({"XLEN", stream + ":dlq"}) == 1;
        },
        20s))
        << ran.size();
    rc.stop();
    const ConsumerMetrics metrics = rc.consumer().metrics();
    EXPECT_EQ(metrics.done, 102u);
    EXPECT_EQ(metrics.dead_lettered, 1u);
  }
  EXPECT_EQ(owner.integer({"XLEN", stream}), 0);

  StatsReader stats({.connection = {.url = url}, .stream = stream});
  const QueueStats s = stats.read();
  EXPECT_EQ(s.dlq_length, 1);
  EXPECT_EQ(s.length, 0);

  // The Inspector sees both queues, on two masters, through a URL naming a third.
  Inspector inspector({.connection = {.url = url}});
  std::set<std::string> names;
  for (const QueueInfo& q : inspector.queues()) names.insert(q.name);
  EXPECT_TRUE(names.count(stream) == 1 && names.count(other) == 1) << names.size();
  const ActionResult replayed = inspector.replay(stream);
  EXPECT_EQ(replayed.done, 1);
  EXPECT_EQ(owner.integer({"XLEN", stream}), 1);
  // Nothing was written outside the two queues' slots.
  EXPECT_EQ(node0.integer({"DBSIZE"}), 0);
}

// A tenant's tasks on a cluster: the dispatch is an EVALSHA there first (one script cache per
// master); answered NOSCRIPT, it is sent with EVAL, and every task of the tenant runs (before,
// only the first, which went straight to the stream).
TEST(Cluster, ATenantsTasksRunOnACluster) {
  ClusterTopology t(3);
  const std::string stream = stream_on(t, 1, unique_key());
  const std::string url = t.url({0});
  std::atomic<int> runs{0};
  RunningConsumer rc(cluster_worker_options(url, stream, "w1"),
                     [&](Consumer& c) { c.on("t", [&](const Task&) { ++runs; }); });
  Producer producer({.connection = {.url = url}, .stream = stream});
  for (int i = 0; i < 5; ++i) producer.enqueue("t", "{}", {.tenant = "a"});
  EXPECT_TRUE(wait_until([&] { return runs == 5; }, 10s)) << runs << " of 5 ran";
}

TEST(Cluster, AQueueWhoseKeysWouldSpanSlotsIsRefused) {
  const std::string url = "redis+cluster://127.0.0.1:1";  // never contacted
  const auto refused = [](const std::function<void()>& make) {
    try {
      make();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string message = refused([&] { Producer p({.connection = {.url = url}, .stream = "orders"}); });
  EXPECT_NE(message.find("stream \"orders\" cannot be used on Redis Cluster"), std::string::npos) << message;
  EXPECT_NE(message.find("\"{orders}\""), std::string::npos) << message;
  EXPECT_NE(refused([&] { Consumer c({.connection = {.url = url}, .stream = "orders"}); }), "accepted");
  EXPECT_NE(refused([&] { StatsReader s({.connection = {.url = url}, .stream = "orders"}); }), "accepted");
  EXPECT_NE(refused([&] { Scheduler s({.queue = {.connection = {.url = url}, .stream = "orders"}}); }),
            "accepted");
  // An empty tag is no tag.
  EXPECT_NE(refused([&] { Producer p({.connection = {.url = url}, .stream = "{}orders"}); }), "accepted");
  EXPECT_EQ(refused([&] { Producer p({.connection = {.url = url}, .stream = "{orders}"}); }), "accepted");
  EXPECT_EQ(refused([&] { Consumer c({.connection = {.url = url}, .stream = "shop:{orders}"}); }),
            "accepted");
  // On a single server, any name.
  EXPECT_EQ(refused([&] { Producer p({.connection = {.url = "redis://127.0.0.1:1"}, .stream = "orders"}); }),
            "accepted");
}

TEST(Cluster, AServerThatIsNotAClusterNodeIsAConfigurationMistake) {
  RedisServer plain;
  Producer producer(
      {.connection = {.url = "redis+cluster://127.0.0.1:" + std::to_string(plain.port())}, .stream = "{q}"});
  try {
    producer.enqueue("t", "{}");
    ADD_FAILURE() << "enqueued on a server without cluster support through a cluster URL";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a cluster node"), std::string::npos) << e.what();
  }
}

// With partitions on several masters, min_replicas_acked asks every master written to: one
// whose replica is stopped is enough for a ReplicationError.
TEST(Cluster, ReplicaAcknowledgementsAreAskedOfEveryMasterWritten) {
  ClusterTopology t(3, 1);  // nodes 0-2 masters, 3-5 their replicas
  const std::string queue = plain_key();
  constexpr int kPartitions = 6;
  ProducerOptions po{.connection = {.url = t.url({0}), .socket_timeout = 3s}, .stream = queue};
  po.partitions = kPartitions;
  po.min_replicas_acked = 1;
  po.replicas_ack_timeout = 500ms;
  Producer producer(po);
  const auto batch = [](const std::string& prefix) {
    std::vector<TaskSpec> tasks;
    for (int i = 0; i < 60; ++i) {
      tasks.push_back(
          {.task_type = "t", .payload = "{}", .options = {.task_id = prefix + std::to_string(i)}});
    }
    return tasks;
  };
  EXPECT_EQ(producer.enqueue_batch(batch("a")).size(), 60u);  // every replica acknowledged
  // The replica of the master of partition 0 stops (a batch of 60 writes to every partition).
  const int master = t.owner_of(detail::key_slot(detail::partition_stream(queue, kPartitions, 0)));
  ASSERT_GE(master, 0);
  t.node(3 + master).pause();
  try {
    producer.enqueue_batch(batch("b"));
    ADD_FAILURE() << "acknowledged without the stopped replica";
  } catch (const ReplicationError& e) {
    EXPECT_EQ(e.acknowledged(), 0);
    EXPECT_EQ(e.task_ids().size(), 60u);
  }
  t.node(3 + master).resume();
  // Written all the same: queued, and each partition holds its share of both batches.
  std::int64_t queued = 0;
  for (int i = 0; i < kPartitions; ++i) {
    const std::string stream = detail::partition_stream(queue, kPartitions, i);
    queued += Client(t.node(t.owner_of(detail::key_slot(stream))).url()).integer({"XLEN", stream});
  }
  EXPECT_EQ(queued, 120);
}

/// A producer of `queue` (in `partitions`) through node 0 that waits for one replica of each
/// master written to, `ack_timeout` at most.
ProducerOptions waiting_for_a_replica(ClusterTopology& t, const std::string& queue, int partitions,
                                      std::chrono::milliseconds ack_timeout) {
  ProducerOptions po{.connection = {.url = t.url({0}), .socket_timeout = 3s}, .stream = queue};
  po.partitions = partitions;
  po.min_replicas_acked = 1;
  po.replicas_ack_timeout = ack_timeout;
  return po;
}

// Threads sharing one Producer each wait for the replicas after their own write. Another
// caller's WAIT can come between a write and its caller's WAIT and cover it: that caller's WAIT
// then has no master written to since, and still asks the masters written to, not none.
TEST(Cluster, ConcurrentCallersWaitingForReplicasAreEachAnsweredWithWhatTheReplicasHave) {
  ClusterTopology t(3, 1);
  const std::string queue = plain_key();
  const ProducerOptions po = waiting_for_a_replica(t, queue, 3, 1500ms);
  Producer producer(po);
  constexpr int kThreads = 4;
  constexpr int kEach = 200;
  std::mutex m;
  std::vector<std::string> refused;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < kEach; ++n) {
        try {
          producer.enqueue("t", "{}", {.task_id = std::to_string(i) + "-" + std::to_string(n)});
        } catch (const ReplicationError& e) {
          std::lock_guard lock(m);
          refused.push_back(e.what());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.size(), 0u) << refused.front();
  std::int64_t queued = 0;
  for (int i = 0; i < po.partitions; ++i) {
    const std::string stream = detail::partition_stream(queue, po.partitions, i);
    queued += Client(t.node(t.owner_of(detail::key_slot(stream))).url()).integer({"XLEN", stream});
  }
  EXPECT_EQ(queued, kThreads * kEach);
}

// The replica of one master stops while threads share a Producer: no call whose task went to
// that master returns as acknowledged, however the callers' WAITs interleave (one caller's WAIT
// can cover another's write; what it found is its own caller's), and each refused call names its
// own task.
TEST(Cluster, NoConcurrentCallerWhoseMastersReplicaStoppedIsToldItsTaskIsReplicated) {
  ClusterTopology t(3, 1);  // nodes 0-2 masters, 3-5 their replicas
  const std::string queue = plain_key();
  const ProducerOptions po = waiting_for_a_replica(t, queue, 6, 100ms);
  Producer producer(po);
  const int master = t.owner_of(detail::key_slot(detail::partition_stream(queue, po.partitions, 0)));
  ASSERT_GE(master, 0);
  std::set<int> paused_partitions;
  for (int i = 0; i < po.partitions; ++i) {
    if (t.owner_of(detail::key_slot(detail::partition_stream(queue, po.partitions, i))) == master)
      paused_partitions.insert(i);
  }
  ASSERT_LT(paused_partitions.size(), static_cast<std::size_t>(po.partitions)) << "another master holds some";
  t.node(3 + master).pause();
  constexpr int kThreads = 4;
  constexpr int kEach = 25;
  std::mutex m;
  std::set<std::string> acknowledged;
  std::vector<std::string> misnamed;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < kEach; ++n) {
        const std::string id = std::to_string(i) + "-" + std::to_string(n);
        try {
          producer.enqueue("t", "{}", {.task_id = id});
          std::lock_guard lock(m);
          acknowledged.insert(id);
        } catch (const ReplicationError& e) {
          std::lock_guard lock(m);
          if (e.task_ids() != std::vector<std::string>{id}) misnamed.push_back(id + ": " + e.what());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  t.node(3 + master).resume();
  EXPECT_TRUE(misnamed.empty()) << misnamed.front();
  std::size_t on_paused = 0;
  std::vector<std::string> told_replicated;
  for (const int p : paused_partitions) {
    const std::string stream = detail::partition_stream(queue, po.partitions, p);
    for (const auto& [entry, fields] : Client(t.node(master).url()).xrange(stream)) {
      const std::string id = Client::get(fields, "task_id");
      ++on_paused;
      if (acknowledged.count(id) != 0) told_replicated.push_back(id);
    }
  }
  EXPECT_GT(on_paused, 0u);
  EXPECT_TRUE(told_replicated.empty())
      << told_replicated.size() << " tasks of the master whose replica "
      << "stopped were acknowledged as replicated, e.g. " << told_replicated.front();
}

}  // namespace
}  // namespace streamq::test
