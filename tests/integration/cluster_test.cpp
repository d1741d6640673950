// SPDX-License-Identifier: MIT
// redis+cluster:// URLs on a private Redis Cluster: routing by slot, refusing a queue whose keys
// would span slots, MOVED/ASK while a queue's (or one partition's) slot migrates, a master's
// kill -9 under a one-stream queue and under a partitioned queue over every master.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "failover_workers.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

ConsumerOptions cluster_worker_options(const std::string& url, const std::string& stream,
                                       const std::string& name) {
  return failover_worker_options(url, stream, name, 2s);
}

/// A queue name (with a hash tag) whose slot node `owner` of `t` serves.
std::string stream_on(ClusterTopology& t, int owner, std::string base) {
  std::erase(base, '{');  // unique_key() has a hash tag of its own
  std::erase(base, '}');
  for (int i = 0; i < 1000; ++i) {
    const std::string name = "{" + base + "-" + std::to_string(i) + "}";
    if (t.owner_of(detail::key_slot(name)) == owner) return name;
  }
  throw std::runtime_error("no name found for the node");
}

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
  EXPECT_NE(refused([&] { Scheduler s({.connection = {.url = url}, .stream = "orders"}); }), "accepted");
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

/// unique_key() without its braces: the base name of a partitioned queue.
std::string plain_key(std::string_view suffix = "q") {
  std::string k = unique_key(suffix);
  std::erase(k, '{');
  std::erase(k, '}');
  return k;
}

/// A partitioned queue's base name for which `fits(name)` holds.
std::string partitioned_name(const std::function<bool(const std::string&)>& fits) {
  const std::string base = plain_key();
  for (int i = 0; i < 1000; ++i) {
    const std::string name = base + "-" + std::to_string(i);
    if (fits(name)) return name;
  }
  throw std::runtime_error("no partitioned queue name fits");
}

/// The streams of queue `queue` of `partitions` partitions (the queue itself when 1).
std::vector<std::string> queue_streams(const std::string& queue, int partitions) {
  if (partitions == 1) return {queue};
  std::vector<std::string> out;
  for (int i = 0; i < partitions; ++i) out.push_back(detail::partition_stream(queue, partitions, i));
  return out;
}

/// Tasks queued or pending (group "workers") in `streams`, each read on the master serving it now.
std::int64_t left_in(ClusterTopology& t, const std::vector<std::string>& streams) {
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
  EXPECT_EQ(before.total_length, static_cast<std::int64_t>(expected.size()) + 1);
  // The operator's view: one queue over the masters, its partitions summed.
  Inspector inspector({.connection = {.url = url}});
  const std::vector<QueueInfo> found = inspector.queues();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].name, queue);
  EXPECT_EQ(found[0].partitions.size(), static_cast<std::size_t>(kPartitions));
  EXPECT_EQ(found[0].length, before.total_length);
  EXPECT_EQ(inspector.stats(queue).total_length, before.total_length);

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
          return s.total_length == 0 && s.total_pending == 0 && s.dlq_length == 1;
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
  EXPECT_EQ(inspector.stats(queue).total_length, 1) << "back in its partition";

  // Each partition needs a handler thread.
  ConsumerOptions too_few = o1;
  too_few.concurrency = kPartitions - 1;
  EXPECT_THROW(Consumer{too_few}, ConfigError);
}

// doctor() checks every master: each has its own configuration, replicas and ACL users.
TEST(Cluster, DoctorChecksEveryMaster) {
  ClusterTopology t(3);
  Inspector inspector({.connection = {.url = t.url({0})}});
  std::set<std::string> addresses;
  int persistence = 0;
  for (const Finding& f : inspector.doctor("{q}")) {
    addresses.insert(f.message.substr(0, f.message.find(": ")));
    if (f.topic == "persistence") ++persistence;
  }
  EXPECT_EQ(persistence, 3);
  std::set<std::string> masters;
  for (int i = 0; i < 3; ++i) masters.insert("127.0.0.1:" + std::to_string(t.node(i).port()));
  EXPECT_EQ(addresses, masters);
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

// Changing a live queue's partition count, as docs/cluster.md says: to shrink, producers first,
// and workers of the old count until the partitions left behind are empty (delayed tasks and
// retries included); to grow, workers first. Nothing is lost either way. (The procedure does
// not depend on the cluster: a single server runs it faster.)
TEST(Partitions, TheCountOfALiveQueueChangesWithoutLosingATask) {
  RedisServer server;
  const std::string queue = plain_key();
  RunLog log;
  std::set<std::string> expected;
  std::atomic<bool> fail_first{true};
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
    return s.total_length == 0 && s.total_pending == 0 && s.delayed == 0;
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
  Scheduler scheduler({.connection = {.url = url}, .stream = queue, .partitions = kPartitions});
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

INSTANTIATE_TEST_SUITE_P(ReplicaAcks, ClusterFailover, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 0 ? std::string("Without") : std::string("WithOneReplica");
                         });

}  // namespace
}  // namespace streamq::test
