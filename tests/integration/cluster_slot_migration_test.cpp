// SPDX-License-Identifier: MIT
// A queue's slot, or one partition's, migrates to another master key by key while a producer
// and two workers use it (ASK and TRYAGAIN while its keys are split, MOVED after): every
// acknowledged task runs, and nothing stays behind on the old master.
#include <algorithm>
#include <chrono>
#include <iostream>
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

// A slot of the queue moves to another master while a producer and two workers use it, key by
// key as redis-cli --cluster reshard moves it (ASK and TRYAGAIN while its keys are split
// between the two, MOVED after): every acknowledged task runs, and nothing stays behind. With
// partitions > 1 it is partition 0's slot, while the other partitions stay where they are.
void migrate_while_in_use(int partitions) {
  ClusterTopology t(3);
  const std::string queue =
      partitions == 1 ? stream_on(t, 0, unique_key()) : partitioned_name([&](const std::string& n) {
        return t.owner_of(detail::key_slot(detail::partition_stream(n, partitions, 0))) == 0;
      });
  const std::vector<std::string> streams = queue_streams(queue, partitions);
  const int slot = detail::key_slot(streams[0]);
  const std::string url = t.url({2});
  RunLog log;
  const auto handler = [&](Consumer& c) { c.on("n", [&](const Task& task) { log.add(task.id()); }); };
  auto o1 = cluster_worker_options(url, queue, "w1");
  auto o2 = cluster_worker_options(url, queue, "w2");
  o1.partitions = o2.partitions = partitions;
  o1.concurrency = o2.concurrency = std::max(o1.concurrency, partitions);
  RunningConsumer w1(o1, handler);
  RunningConsumer w2(o2, handler);
  SteadyProducer producer({.connection = {.url = url, .backoff_max = 200ms},
                           .stream = queue,
                           .max_len = 1'000'000,
                           .partitions = partitions});
  std::this_thread::sleep_for(500ms);
  // One key at a time, 100 ms apart: the queue's keys are split between the two masters for
  // a while (the stream, its levels, the dead letters and delayed sets, ...).
  t.migrate_slot(slot, 1, 1, [] { std::this_thread::sleep_for(100ms); });
  ASSERT_TRUE(t.wait_until_ok(slot));
  producer.mark();
  ASSERT_TRUE(wait_until([&] { return producer.after_mark() >= 300; }, 20s))
      << "the producer did not follow the slot: " << producer.last_refusal();
  producer.stop();

  const auto left = [&] { return left_in(t, streams); };
  ASSERT_TRUE(wait_until([&] { return left() == 0; }, 30s)) << left() << " tasks left behind";
  w1.stop();
  w2.stop();
  const auto [lost, duplicated] = log.lost_and_duplicated(producer.acknowledged());
  std::cout << "slot migration, " << partitions << " partition(s): acknowledged "
            << producer.acknowledged().size() << ", lost " << lost << ", run twice " << duplicated
            << ", refused attempts " << producer.refusals() << "\n";
  EXPECT_EQ(lost, 0u);
  // Nothing of the queue stayed on the old master (a key written there after the move would
  // be out of reach).
  Client moved_from(t.node(0).url());
  EXPECT_EQ(moved_from.integer({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), 0);
  Client moved_to(t.node(1).url());
  EXPECT_EQ(moved_to.integer({"XLEN", streams[0] + ":dlq"}), 0);
}

TEST(Cluster, TheQueuesSlotMigratesWhileItIsInUse) { migrate_while_in_use(1); }

TEST(Cluster, APartitionsSlotMigratesWhileTheQueueIsInUse) { migrate_while_in_use(3); }

}  // namespace
}  // namespace streamq::test
