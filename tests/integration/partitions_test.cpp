// SPDX-License-Identifier: MIT
// Partitioned queues: producers spread a queue's tasks over its partitions on several masters
// (in turn, or by a partition key that keeps related tasks together and in order) with
// uniqueness across them, workers run everything and Stats sums them; the partition count of a
// live queue changes without losing a task; a schedule's ticks go to the partition its name
// picks.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
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

// One queue in 6 partitions over 3 masters: producers spread the tasks (in turn, or by a
// partition key that keeps related tasks together and in order), uniqueness holds across
// partitions, two workers run everything, and Stats sums the partitions.
TEST(Cluster, APartitionedQueueSpreadsOverTheMasters) {
  ClusterTopology t(3);
  const std::string url = t.url({0});
  const std::string queue = plain_key();
  constexpr int kPartitions = 6;
  std::set<int> masters;
  for (int i = 0; i < kPartitions; ++i) {
    masters.insert(t.owner_of(detail::key_slot(detail::partition_stream(queue, kPartitions, i))));
  }
  ASSERT_GE(masters.size(), 2u) << "the partitions' names all hash to one master";

  ProducerOptions po{.connection = {.url = url}, .stream = queue, .partitions = kPartitions};
  Producer producer(po);
  std::set<std::string> expected;
  for (int i = 0; i < 60; ++i)
    expected.insert(producer.enqueue("t", "{}", {.task_id = "rr" + std::to_string(i)}));
  std::vector<TaskSpec> batch;
  for (int i = 0; i < 150; ++i) {
    batch.push_back({.task_type = "t", .payload = "{}", .options = {.task_id = "b" + std::to_string(i)}});
  }
  for (int i = 0; i < 20; ++i) {
    batch.push_back({.task_type = "ordered",
                     .payload = nlohmann::json{{"n", i}},
                     .options = {.task_id = "k" + std::to_string(i), .partition_key = "customer-7"}});
  }
  for (const std::string& id : producer.enqueue_batch(batch)) expected.insert(id);
  // Uniqueness spans the partitions: the lock is in the unique key's partition.
  expected.insert(
      producer.enqueue("t", "{}", {.task_id = "u1", .unique_for = 1min, .unique_key = "report-42"}));
  EXPECT_THROW(producer.enqueue("t", "{}", {.task_id = "u2", .unique_for = 1min, .unique_key = "report-42"}),
               DuplicateTaskError);
  producer.enqueue("fails", "{}", {.task_id = "doomed", .max_retries = 0});

  // Round robin: every partition got its share; the keyed tasks are all in one, in order.
  const int keyed = static_cast<int>(detail::crc16("customer-7") % kPartitions);
  for (int i = 0; i < kPartitions; ++i) {
    const std::string stream = detail::partition_stream(queue, kPartitions, i);
    Client node(t.node(t.owner_of(detail::key_slot(stream))).url());
    EXPECT_GE(node.integer({"XLEN", stream}), 35) << stream;
    if (i != keyed) continue;
    std::vector<std::string> order;
    for (const auto& [id, fields] : node.xrange(stream)) {
      if (Client::get(fields, "task_type") == "ordered") order.push_back(Client::get(fields, "task_id"));
    }
    ASSERT_EQ(order.size(), 20u);
    for (int k = 0; k < 20; ++k) EXPECT_EQ(order[static_cast<std::size_t>(k)], "k" + std::to_string(k));
  }

  StatsReader stats({.connection = {.url = url}, .stream = queue, .partitions = kPartitions});
  QueueStats before = stats.read();
  EXPECT_EQ(before.partitions, kPartitions);
  EXPECT_EQ(before.length, static_cast<std::int64_t>(expected.size()) + 1);
  // The operator's view: one queue over the masters, its partitions summed.
  Inspector inspector({.connection = {.url = url}});
  const std::vector<QueueInfo> found = inspector.queues();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].name, queue);
  EXPECT_EQ(found[0].partitions.size(), static_cast<std::size_t>(kPartitions));
  EXPECT_EQ(found[0].length, before.length);
  EXPECT_EQ(inspector.stats(queue).length, before.length);

  RunLog log;
  const auto handler = [&](Consumer& c) {
    c.on("t", [&](const Task& task) { log.add(task.id()); });
    c.on("ordered", [&](const Task& task) { log.add(task.id()); });
    c.on("fails", [](const Task&) { throw std::runtime_error("no"); });
  };
  std::map<std::string, std::uint64_t> done_by;  // tasks each worker ran
  auto o1 = cluster_worker_options(url, queue, "w1");
  auto o2 = cluster_worker_options(url, queue, "w2");
  o1.partitions = o2.partitions = kPartitions;
  o1.concurrency = o2.concurrency = kPartitions;
  {
    RunningConsumer w1(o1, handler);
    RunningConsumer w2(o2, handler);
    ASSERT_TRUE(wait_until(
        [&] {
          const QueueStats s = stats.read();
          return s.length == 0 && s.pending_total == 0 && s.dlq_length == 1;
        },
        30s));
    w1.stop();
    w2.stop();
    done_by = {{"w1", w1.consumer().metrics().done}, {"w2", w2.consumer().metrics().done}};
    EXPECT_EQ(done_by["w1"] + done_by["w2"], expected.size());
  }
  const auto [lost, duplicated] = log.lost_and_duplicated(expected);
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(duplicated, 0u);
  const QueueStats after = stats.read();
  ASSERT_EQ(after.groups.size(), 1u);
  EXPECT_EQ(after.groups[0].name, "workers");
  // The group's consumers, the union over the partitions: a consumer is in a group once a read
  // served it (Redis 7.0 does not add one whose blocking read found nothing), so each worker
  // that ran a task is listed, and no one else. (One may drain the queue before the other's
  // first read, more so under a sanitizer.)
  std::set<std::string> listed;
  for (const ConsumerInfo& c : after.groups[0].consumers) listed.insert(c.name);
  for (const auto& [name, done] : done_by) {
    if (done > 0) {
      EXPECT_TRUE(listed.contains(name)) << name;
    }
  }
  for (const std::string& name : listed) EXPECT_TRUE(name == "w1" || name == "w2") << name;
  EXPECT_EQ(after.groups[0].pending, 0);
  EXPECT_TRUE(after.groups[0].last_delivered_id.empty());
  EXPECT_EQ(after.levels.at(1).stream, queue);
  EXPECT_NE(after.to_json().find("\"partitions\": 6"), std::string::npos);
  const TaskPage dead = inspector.tasks(queue, {.state = TaskState::dead});
  ASSERT_EQ(dead.tasks.size(), 1u);
  EXPECT_EQ(dead.tasks[0].task_id(), "doomed");
  EXPECT_EQ(dead.tasks[0].key, dead.tasks[0].partition + ":dlq");
  EXPECT_EQ(
      inspector.replay(queue, {.filter = {.ids = {dead.tasks[0].partition + "/" + dead.tasks[0].id}}}).done,
      1);
  EXPECT_EQ(inspector.stats(queue).length, 1) << "back in its partition";

  // Each partition needs a handler thread.
  ConsumerOptions too_few = o1;
  too_few.concurrency = kPartitions - 1;
  EXPECT_THROW(Consumer{too_few}, ConfigError);
}

// Changing a live queue's partition count, as docs/cluster.md says: to shrink, producers first,
// and workers of the old count until the partitions left behind are empty (delayed tasks and
// retries included); to grow, workers first. Nothing is lost either way. (The procedure does
// not depend on the cluster: a single server runs it faster.)
// Flows in a partitioned queue on the cluster: each flow lives in one partition (its root's), so
// its bookkeeping is in one slot; the flows spread over the partitions, and every parent runs
// once with its children's results.
TEST(Cluster, FlowsAcrossThePartitionsOfAQueueRunEachParentOnceWithEveryResult) {
  ClusterTopology t(3);
  const std::string url = t.url({0});
  const std::string queue = plain_key();
  constexpr int kPartitions = 6;
  Producer producer({.connection = {.url = url}, .stream = queue, .partitions = kPartitions});
  std::vector<FlowIds> flows;
  for (int i = 0; i < 12; ++i) {
    std::vector<TaskSpec> header;
    for (int c = 0; c < 6; ++c) header.push_back({.task_type = "child", .payload = {{"n", 10 * i + c}}});
    flows.push_back(
        producer.enqueue_flow(chord(std::move(header), {.task_type = "parent", .payload = "{}"})));
  }
  // A parent in its root's partition, its children in theirs: the next in turn, so every
  // partition, on every master.
  const auto exists = [&](const std::string& key) {
    Client node(t.node(t.owner_of(detail::key_slot(key))).url());
    return node.integer({"EXISTS", key}) == 1;
  };
  const auto where = [&](const std::string& id) {
    for (int p = 0; p < kPartitions; ++p) {
      const std::string part = detail::partition_stream(queue, kPartitions, p);
      if (exists(detail::task_key(part, id))) return part;
    }
    return std::string();
  };
  std::set<std::string> homes;
  std::set<int> masters;  // the masters children live on
  for (const FlowIds& f : flows) {
    homes.insert(where(f.task_id));
    std::set<std::string> parts;
    for (const FlowIds& c : f.children) {
      const std::string part = where(c.task_id);
      ASSERT_FALSE(part.empty()) << "placed";
      parts.insert(part);
      masters.insert(t.owner_of(detail::key_slot(part)));
    }
    EXPECT_EQ(parts.size(), 6u) << "a flow's children in every partition";
  }
  EXPECT_GE(homes.size(), 2u) << "the flows spread over the partitions";
  EXPECT_EQ(masters.size(), 3u);
  std::mutex m;
  std::map<std::string, std::vector<ChildResult>> read;  // parent id -> what it read
  std::map<std::string, int> runs;
  auto o = cluster_worker_options(url, queue, "w1");
  o.partitions = kPartitions;
  o.concurrency = kPartitions;
  RunningConsumer w(o, [&](Consumer& c) {
    c.on("child", [](const Task& task) { task.set_result(std::to_string(task.json()["n"].get<int>())); });
    c.on("parent", [&](const Task& task) {
      std::lock_guard lock(m);
      read[task.id()] = task.children_results();
      ++runs[task.id()];
    });
  });
  for (const FlowIds& f : flows) EXPECT_EQ(producer.wait(f.task_id, 30s).state, TaskRecord::State::done);
  std::lock_guard lock(m);
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const FlowIds& f = flows[i];
    EXPECT_EQ(runs[f.task_id], 1);
    ASSERT_EQ(read[f.task_id].size(), 6u) << f.task_id;
    for (std::size_t c = 0; c < 6; ++c) {
      EXPECT_EQ(read[f.task_id][c].task_id, f.children[c].task_id);
      EXPECT_EQ(read[f.task_id][c].as<int>(), static_cast<int>(10 * i + c));
    }
  }
}

// A flow across queues on Redis Cluster: the parents' queue on one master, the children's (a
// partitioned queue) on the others too. Each child's end is carried from its queue's slot to the
// parent's, on another master; each parent runs once and reads its children's results in order.
TEST(Cluster, FlowsAcrossQueuesOnOtherMastersRunEachParentOnceWithEveryResult) {
  ClusterTopology t(3);
  const std::string url = t.url({0});
  const std::string home = stream_on(t, 0, plain_key("home"));
  constexpr int kPartitions = 4;
  const std::string other = partitioned_name([&](const std::string& name) {
    std::set<int> owners;
    for (int p = 0; p < kPartitions; ++p)
      owners.insert(t.owner_of(detail::key_slot(detail::partition_stream(name, kPartitions, p))));
    return owners.count(1) == 1 && owners.count(2) == 1;  // partitions on both other masters
  });
  Producer producer({.connection = {.url = url}, .stream = home});
  // A queue of one partition whose name has no hash tag: its keys would span slots, and no
  // placement there could be made.
  FlowNode untagged{.task_type = "parent", .payload = "{}"};
  untagged.children.push_back(
      {.task_type = "child", .payload = "{}", .queue = FlowQueue{.stream = plain_key("gpu")}});
  EXPECT_THROW(producer.enqueue_flow(untagged), ConfigError);
  std::vector<FlowIds> flows;
  for (int i = 0; i < 8; ++i) {
    FlowNode parent{.task_type = "parent", .payload = "{}"};
    for (int c = 0; c < 5; ++c) {
      parent.children.push_back({.task_type = "child",
                                 .payload = {{"n", 10 * i + c}},
                                 .queue = FlowQueue{.stream = other, .partitions = kPartitions}});
    }
    flows.push_back(producer.enqueue_flow(parent));
  }
  std::mutex m;
  std::map<std::string, std::vector<ChildResult>> read;  // parent id -> what it read
  std::map<std::string, int> runs;
  RunningConsumer parents(cluster_worker_options(url, home, "w1"), [&](Consumer& c) {
    c.on("parent", [&](const Task& task) {
      std::lock_guard lock(m);
      read[task.id()] = task.children_results();
      ++runs[task.id()];
    });
  });
  auto o = cluster_worker_options(url, other, "w2");
  o.partitions = kPartitions;
  o.concurrency = kPartitions;
  RunningConsumer children(o, [&](Consumer& c) {
    c.on("child", [](const Task& task) { task.set_result(std::to_string(task.json()["n"].get<int>())); });
  });
  for (const FlowIds& f : flows) EXPECT_EQ(producer.wait(f.task_id, 30s).state, TaskRecord::State::done);
  std::lock_guard lock(m);
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const FlowIds& f = flows[i];
    EXPECT_EQ(runs[f.task_id], 1);
    ASSERT_EQ(read[f.task_id].size(), 5u) << f.task_id;
    for (std::size_t c = 0; c < 5; ++c) {
      EXPECT_EQ(read[f.task_id][c].task_id, f.children[c].task_id);
      EXPECT_EQ(read[f.task_id][c].as<int>(), static_cast<int>(10 * i + c));
    }
  }
}

TEST(Partitions, TheCountOfALiveQueueChangesWithoutLosingATask) {
  RedisServer server;
  const std::string queue = plain_key();
  RunLog log;
  std::set<std::string> expected;
  const auto handler = [&](Consumer& c) {
    c.on("t", [&](const Task& task) { log.add(task.id()); });
    c.on("flaky", [&](const Task& task) {
      if (task.retry_count() == 0) throw std::runtime_error("first attempt fails");
      log.add(task.id());
    });
  };
  const auto workers = [&](int partitions, const std::string& name) {
    auto o = cluster_worker_options(server.url(), queue, name);
    o.partitions = partitions;
    o.concurrency = partitions;
    o.retry_backoff = {.base = 300ms, .cap = 300ms};
    return o;
  };
  const auto enqueue = [&](int partitions, const std::string& prefix, int n) {
    Producer p({.connection = {.url = server.url()}, .stream = queue, .partitions = partitions});
    for (int i = 0; i < n; ++i) {
      const std::string id = prefix + std::to_string(i);
      if (i % 5 == 0) {
        p.enqueue("t", "{}", {.task_id = id, .delay = 400ms});
      } else if (i % 5 == 1) {
        p.enqueue("flaky", "{}", {.task_id = id});
      } else {
        p.enqueue("t", "{}", {.task_id = id});
      }
      expected.insert(id);
    }
  };
  const auto empty = [&](const std::string& stream) {
    const QueueStats s = StatsReader({.connection = {.url = server.url()}, .stream = stream}).read();
    return s.length == 0 && s.pending_total == 0 && s.delayed == 0;
  };

  // 3 partitions, shrinking to 2: the producers move first.
  enqueue(3, "a", 90);
  {
    RunningConsumer old_count(workers(3, "w3"), handler);
    enqueue(2, "b", 60);
    // Partition 2 gets nothing new; the workers of 3 empty it (the delayed tasks and the
    // retries there come back to it, and are run there).
    ASSERT_TRUE(wait_until([&] { return empty(detail::partition_stream(queue, 3, 2)); }, 20s));
    old_count.stop();
  }
  // Growing to 4: the workers move first, then the producers.
  {
    RunningConsumer new_count(workers(4, "w4"), handler);
    enqueue(4, "c", 80);
    ASSERT_TRUE(wait_until(
        [&] {
          for (int i = 0; i < 4; ++i) {
            if (!empty(detail::partition_stream(queue, 4, i))) return false;
          }
          return true;
        },
        20s));
    new_count.stop();
  }
  const auto [lost, duplicated] = log.lost_and_duplicated(expected);
  EXPECT_EQ(lost, 0u) << "of " << expected.size();
  EXPECT_EQ(duplicated, 0u);
  EXPECT_TRUE(empty(detail::partition_stream(queue, 3, 2)));
}

// A Scheduler of a partitioned queue sends every tick of a schedule to the partition its name
// picks, with the schedule's record beside them, where a partitioned worker runs them.
TEST(Partitions, ASchedulesTicksGoToThePartitionItsNamePicks) {
  ClusterTopology t(3);
  const std::string url = t.url({1});
  const std::string queue = plain_key();
  constexpr int kPartitions = 4;
  Scheduler scheduler({.queue = {.connection = {.url = url}, .stream = queue, .partitions = kPartitions}});
  scheduler.add("often", Schedule::every(100ms), "tick", "{}");
  scheduler.start();
  ASSERT_TRUE(wait_until([&] { return scheduler.metrics().enqueued >= 3; }, 10s));
  scheduler.stop();
  const std::uint64_t ticks = scheduler.metrics().enqueued;
  const int picked = static_cast<int>(detail::crc16("often") % kPartitions);
  for (int i = 0; i < kPartitions; ++i) {
    const std::string stream = detail::partition_stream(queue, kPartitions, i);
    Client node(t.node(t.owner_of(detail::key_slot(stream))).url());
    EXPECT_EQ(node.integer({"XLEN", stream}), i == picked ? static_cast<std::int64_t>(ticks) : 0) << stream;
    EXPECT_EQ(node.integer({"EXISTS", stream + ":sched:often"}), i == picked ? 1 : 0) << stream;
  }
  RunLog log;
  auto o = cluster_worker_options(url, queue, "w1");
  o.partitions = o.concurrency = kPartitions;
  RunningConsumer worker(o,
                         [&](Consumer& c) { c.on("tick", [&](const Task& task) { log.add(task.id()); }); });
  EXPECT_TRUE(wait_until(
      [&] {
        std::lock_guard lock(log.m);
        return log.runs.size() == ticks;
      },
      10s));
}

}  // namespace
}  // namespace streamq::test
