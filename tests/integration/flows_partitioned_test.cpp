// SPDX-License-Identifier: MIT
// Flows across the partitions of a partitioned queue: the parents live in the root's
// partition (the home), each child without children in its own; a child's end is carried home
// by the consumers' courier, and children the producer could not place are placed by it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "flow_runs.hpp"
#include "redis/cluster.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;
using State = TaskRecord::State;

constexpr int kPartitions = 4;

class PartitionedFlowsTest : public ConsumerTest {
 protected:
  Inspector inspector{InspectorOptions{.connection = {.url = server.url()}}};

  std::string part(int i) const { return detail::partition_stream(stream, kPartitions, i); }
  Producer partitioned_producer(const std::string& url) const {
    return Producer({.connection = {.url = url}, .stream = stream, .partitions = kPartitions});
  }
  ConsumerOptions partitioned(const std::string& name) const {
    ConsumerOptions o = options();
    o.partitions = kPartitions;
    o.concurrency = 2 * kPartitions;
    o.consumer_name = name;
    return o;
  }
  State state_of(const std::string& id) {
    const auto r = inspector.record(stream, id);
    return r ? r->state : static_cast<State>(-1);
  }
  /// Entries left in the partitions' outboxes, placements not made, and flow keys left anywhere.
  std::int64_t leftovers() {
    std::int64_t n = 0;
    for (int i = 0; i < kPartitions; ++i) {
      n += client.integer({"XLEN", part(i) + ":flows:outbox"}) +
           client.integer({"HLEN", part(i) + ":flows:placing"});
      n += static_cast<std::int64_t>(client.cmd({"KEYS", part(i) + ":flow:*"}).view().size());
    }
    return n;
  }
  /// The placements waiting in partition `i`'s hash, aged as if written `ms` earlier (each
  /// value starts with the time it was written: `<length>:<ms>`), so a courier takes them now
  /// rather than after its grace.
  std::map<std::string, std::string> aged_placements(int i, std::int64_t ms) {
    std::map<std::string, std::string> out;
    const detail::Reply r = client.cmd({"HGETALL", part(i) + ":flows:placing"});
    for (std::size_t k = 0; k + 1 < r.view().size(); k += 2) {
      const std::string value(r.view()[k + 1].str());
      const std::size_t colon = value.find(':');
      const std::size_t end = colon + 1 + std::stoul(value.substr(0, colon));
      const std::string at = std::to_string(std::stoll(value.substr(colon + 1, end - colon - 1)) - ms);
      out[std::string(r.view()[k].str())] = std::to_string(at.size()) + ":" + at + value.substr(end);
    }
    return out;
  }
  /// The id of the last entry ever added to `key` (XINFO STREAM's last-generated-id).
  std::string last_id(const std::string& key) {
    const detail::Reply r = client.cmd({"XINFO", "STREAM", key});
    for (std::size_t k = 0; k + 1 < r.view().size(); k += 2) {
      if (r.view()[k].str() == "last-generated-id") return std::string(r.view()[k + 1].str());
    }
    ADD_FAILURE() << "no last-generated-id for " << key;
    return {};
  }
  void put_placements(int i, const std::map<std::string, std::string>& placements) {
    for (const auto& [token, value] : placements)
      client.cmd({"HSET", part(i) + ":flows:placing", token, value});
  }
  /// A partition key whose partition is `i` (CRC16 mod the partition count, as the producer's).
  static std::string key_of_partition(int i) {
    for (int k = 0;; ++k) {
      const std::string key = "root-" + std::to_string(k);
      if (static_cast<int>(detail::crc16(key) % kPartitions) == i) return key;
    }
  }
};

TEST_F(PartitionedFlowsTest, AChordsChildrenRunInEveryPartitionAndItsCallbackOnceWithEveryResult) {
  Producer producer = partitioned_producer(server.url());
  std::vector<TaskSpec> header;
  for (int i = 0; i < 200; ++i) header.push_back({.task_type = "square", .payload = {{"i", i}}});
  const FlowIds ids = producer.enqueue_flow(chord(std::move(header), {.task_type = "sum", .payload = "{}"}));
  ASSERT_EQ(ids.children.size(), 200u);
  // Placed by the producer: every child has its record (queued) before any worker runs.
  std::map<std::string, int> per_partition;
  for (const FlowIds& c : ids.children) {
    const auto r = inspector.record(stream, c.task_id);
    ASSERT_TRUE(r) << c.task_id;
    EXPECT_EQ(r->state, State::queued);
    EXPECT_EQ(r->parent, ids.task_id);
    ++per_partition[r->queue];
  }
  EXPECT_EQ(per_partition.size(), static_cast<std::size_t>(kPartitions))
      << "children spread over the partitions";
  const std::string home = inspector.record(stream, ids.task_id)->queue;
  EXPECT_EQ(client.integer({"HLEN", home + ":flows:placing"}), 0) << "the producer took what it placed out";
  Runs runs;
  auto setup = [&](Consumer& c) { on_squares(c, runs); };
  RunningConsumer a(partitioned("a"), setup);
  RunningConsumer b(partitioned("b"), setup);
  const TaskRecord root = producer.wait(ids.task_id, 30s);
  EXPECT_EQ(root.state, State::done);
  EXPECT_EQ(runs.of(ids.task_id), 1);
  const std::vector<ChildResult> read = runs.read_by(ids.task_id);
  ASSERT_EQ(read.size(), 200u);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(read[static_cast<std::size_t>(i)].task_id, ids.children[static_cast<std::size_t>(i)].task_id);
    EXPECT_EQ(read[static_cast<std::size_t>(i)].as<int>(), i * i);
  }
  for (const FlowIds& c : ids.children) EXPECT_EQ(runs.of(c.task_id), 1);
  EXPECT_TRUE(wait_until([&] { return leftovers() == 0; }, 5s))
      << leftovers() << " outbox entries or flow keys left";
}

// The same without blocking: the future holds the ids once the home's call was answered and the
// children of the other partitions were placed (on the completion thread); a bad flow's
// ConfigError reaches the future, not the caller.
TEST_F(PartitionedFlowsTest, AnAsynchronousChordIsPlacedInEveryPartitionBeforeItsFutureIsReady) {
  Producer producer = partitioned_producer(server.url());
  std::vector<TaskSpec> header;
  for (int i = 0; i < 40; ++i) header.push_back({.task_type = "square", .payload = {{"i", i}}});
  std::future<FlowIds> f =
      producer.enqueue_flow_async(chord(std::move(header), {.task_type = "sum", .payload = "{}"}));
  FlowNode twice{.task_type = "p", .payload = "{}", .options = {.task_id = "x"}};
  twice.children.push_back({.task_type = "c", .payload = "{}", .options = {.task_id = "x"}});
  std::future<FlowIds> bad = producer.enqueue_flow_async(twice);
  const FlowIds ids = f.get();
  EXPECT_THROW(bad.get(), ConfigError);
  ASSERT_EQ(ids.children.size(), 40u);
  std::set<std::string> partitions;
  for (const FlowIds& c : ids.children) {
    const auto r = inspector.record(stream, c.task_id);
    ASSERT_TRUE(r) << c.task_id;
    EXPECT_EQ(r->state, State::queued);
    partitions.insert(r->queue);
  }
  EXPECT_EQ(partitions.size(), static_cast<std::size_t>(kPartitions));
  const std::string home = inspector.record(stream, ids.task_id)->queue;
  EXPECT_EQ(client.integer({"HLEN", home + ":flows:placing"}), 0) << "the producer took what it placed out";
  Runs runs;
  RunningConsumer a(partitioned("a"), [&](Consumer& c) { on_squares(c, runs); });
  const TaskRecord root = producer.wait(ids.task_id, 30s);
  EXPECT_EQ(root.state, State::done);
  EXPECT_EQ(runs.read_by(ids.task_id).size(), 40u);
}

// docs/workflows.md: a flow's home is its root's partition_key's partition, else its task id's.
// A root given neither gets its id first, and the home follows from it (before, the partition
// key was a second new uuid: the home was another partition than the root's id names).
TEST_F(PartitionedFlowsTest, AFlowsHomeIsThePartitionOfItsRootsTaskIdWhenItHasNoPartitionKey) {
  Producer producer = partitioned_producer(server.url());
  std::map<int, int> homes;
  for (int n = 0; n < 12; ++n) {
    const FlowIds ids = producer.enqueue_flow(
        chord({{.task_type = "square", .payload = {{"i", 1}}}}, {.task_type = "sum", .payload = "{}"}));
    // (Its record, checked by key: the home's stream may not exist, the parent waits unwritten.)
    const int expected = static_cast<int>(detail::crc16(ids.task_id) % kPartitions);
    EXPECT_EQ(client.integer({"EXISTS", detail::task_key(part(expected), ids.task_id)}), 1)
        << "flow " << n << ", root " << ids.task_id;
    ++homes[expected];
  }
  // A root with an id of its own: its id's partition (its record is there).
  producer.enqueue_flow(chord({{.task_type = "square", .payload = {{"i", 1}}}},
                              {.task_type = "sum", .payload = "{}", .options = {.task_id = "root-x"}}));
  const std::string home = part(static_cast<int>(detail::crc16("root-x") % kPartitions));
  EXPECT_EQ(client.integer({"EXISTS", detail::task_key(home, "root-x")}), 1);
  EXPECT_GT(homes.size(), 1u) << "flows without a key spread over the partitions";
}

TEST_F(PartitionedFlowsTest, AChildThatFailsInAnotherPartitionFailsItsParentAndItsReplayResumesIt) {
  Producer producer = partitioned_producer(server.url());
  std::atomic<int> attempts{0};
  FlowNode parent{.task_type = "parent", .payload = "{}", .options = {.partition_key = key_of_partition(0)}};
  parent.children.push_back({.task_type = "flaky",
                             .payload = "{}",
                             .options = {.max_retries = 0, .partition_key = key_of_partition(1)}});
  parent.children.push_back(
      {.task_type = "ok", .payload = "{}", .options = {.partition_key = key_of_partition(2)}});
  const FlowIds ids = producer.enqueue_flow(parent);
  Runs runs;
  RunningConsumer rc(partitioned("a"), [&](Consumer& c) { on_flaky_flow(c, runs, attempts); });
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::dead; }, 10s));
  // (The Inspector finds a partitioned queue by its streams: the workers created them.)
  EXPECT_EQ(inspector.record(stream, ids.children[0].task_id)->queue, part(1));
  const TaskRecord dead = *inspector.record(stream, ids.task_id);
  EXPECT_EQ(dead.reason, "child_failed");
  EXPECT_NE(dead.error.find("first time"), std::string::npos) << dead.error;
  EXPECT_EQ(runs.of(ids.task_id), 0);
  EXPECT_EQ(inspector.replay(stream).done, 1);
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::done; }, 10s));
  EXPECT_EQ(runs.of(ids.task_id), 1);
  EXPECT_EQ(runs.results_read_by(ids.task_id), (std::vector<std::string>{"2", "1"}));
  EXPECT_TRUE(wait_until([&] { return leftovers() == 0; }, 5s)) << leftovers();
}

TEST_F(PartitionedFlowsTest, ChildrenTheProducerCouldNotPlaceArePlacedOnceByACourier) {
  // A producer that may write only partition 0: the flow (rooted there) is accepted, and its
  // children of the other partitions wait in partition 0's placements, as after a producer that
  // died between the flow's write and their placement.
  client.cmd({"ACL", "SETUSER", "only-0", "on", ">secret", "~" + part(0) + "*", "+@all"}).view().check();
  const std::string url = "redis://only-0:secret@127.0.0.1:" + std::to_string(server.port());
  Producer limited = partitioned_producer(url);
  std::vector<TaskSpec> header;
  for (int i = 0; i < 12; ++i) {
    // (Records that go at the task's end: the guard, not a record, says a placement was made.)
    header.push_back(
        {.task_type = "child",
         .payload = {{"i", i}},
         .options = {.partition_key = key_of_partition(i % 4), .retention = Retention{.done = 0ms}}});
  }
  const FlowIds ids = limited.enqueue_flow(
      chord(std::move(header),
            {.task_type = "sum", .payload = "{}", .options = {.partition_key = key_of_partition(0)}}));
  EXPECT_EQ(client.integer({"HLEN", part(0) + ":flows:placing"}), 3) << "one placement per other partition";
  EXPECT_FALSE(inspector.record(stream, ids.children[1].task_id)) << "not placed yet";
  EXPECT_EQ(state_of(ids.children[0].task_id), State::queued) << "placed with its flow";
  Runs runs;
  RunningConsumer rc(partitioned("a"), [&](Consumer& c) {
    c.on("child", [&](const Task& t) {
      runs.add(t);
      t.set_result(std::to_string(t.json()["i"].get<int>()));
    });
    c.on("sum", [&](const Task& t) { runs.add(t); });
  });
  // Within the courier's grace (its producer may still be making them), they wait.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(client.integer({"HLEN", part(0) + ":flows:placing"}), 3);
  EXPECT_EQ(runs.of(ids.children[1].task_id), 0);
  // Past it (aged here rather than waited for), the courier makes them.
  const std::map<std::string, std::string> placements = aged_placements(0, 60000);
  put_placements(0, placements);
  Producer waiter = partitioned_producer(server.url());
  EXPECT_EQ(waiter.wait(ids.task_id, 15s).state, State::done);
  const std::vector<ChildResult> read = runs.read_by(ids.task_id);
  ASSERT_EQ(read.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(read[static_cast<std::size_t>(i)].as<int>(), i);
  EXPECT_TRUE(wait_until([&] { return leftovers() == 0; }, 5s)) << leftovers();
  // Carried again (a courier killed before it deleted them): each is made once all the same,
  // though the children's records are gone.
  // (A placement made again would have added entries to its partition's stream before the
  // courier took it out of the hash: each stream's last id says at once that none was added.)
  std::vector<std::string> last_ids;
  for (int i = 1; i < kPartitions; ++i) last_ids.push_back(last_id(part(i)));
  put_placements(0, placements);
  EXPECT_TRUE(wait_until([&] { return leftovers() == 0; }, 5s)) << leftovers();
  for (int i = 1; i < kPartitions; ++i)
    EXPECT_EQ(last_id(part(i)), last_ids[static_cast<std::size_t>(i - 1)]) << "partition " << i;
  for (int i = 0; i < 12; ++i) EXPECT_EQ(runs.of(ids.children[static_cast<std::size_t>(i)].task_id), 1) << i;
}

TEST_F(PartitionedFlowsTest, CancellingAParentCancelsItsChildrenInOtherPartitions) {
  Producer producer = partitioned_producer(server.url());
  FlowNode parent{.task_type = "parent", .payload = "{}", .options = {.partition_key = key_of_partition(3)}};
  for (int i = 0; i < 4; ++i) {
    parent.children.push_back(
        {.task_type = "child", .payload = "{}", .options = {.partition_key = key_of_partition(i)}});
  }
  const FlowIds ids = producer.enqueue_flow(parent);
  EXPECT_EQ(inspector.cancel(stream, ids.task_id), CancelOutcome::cancelled);
  EXPECT_EQ(state_of(ids.task_id), State::cancelled);
  for (const FlowIds& c : ids.children) EXPECT_EQ(state_of(c.task_id), State::cancelled) << c.task_id;
  // The children's ends (in partitions 0 to 2) are carried home, where nothing waits for them.
  std::atomic<int> ran{0};
  RunningConsumer rc(partitioned("a"), [&](Consumer& c) {
    c.on("child", [&](const Task&) { ++ran; });
    c.on("parent", [&](const Task&) { ++ran; });
  });
  EXPECT_TRUE(wait_until([&] { return leftovers() == 0; }, 5s)) << leftovers();
  EXPECT_EQ(ran.load(), 0);
}

TEST_F(PartitionedFlowsTest, ForeignOutboxEntriesAndPlacementsAreDeletedAndTheRestCarried) {
  Producer producer = partitioned_producer(server.url());
  FlowNode parent{.task_type = "parent", .payload = "{}", .options = {.partition_key = key_of_partition(0)}};
  parent.children.push_back(
      {.task_type = "child", .payload = "{}", .options = {.partition_key = key_of_partition(1)}});
  client.cmd({"XADD", part(1) + ":flows:outbox", "*", "kind", "settle", "to", "{elsewhere:1}", "parent", "x",
              "child", "y", "state", "done"});
  client.cmd({"XADD", part(1) + ":flows:outbox", "*", "kind", "settle", "to", part(0), "parent", "x", "child",
              "y", "state", "running"});
  client.cmd({"HSET", part(1) + ":flows:placing", "t1",
              "1:0" + std::to_string(part(2).size()) + ":" + part(2) + "3:1:4"});
  client.cmd({"HSET", part(1) + ":flows:placing", "t2", "garbage"});
  // And one that streamq would carry, which fails where it goes (the parent's pending set is
  // a string there): it stays, and does not hold up the flow's.
  client.cmd({"SET", part(0) + ":flow:broken:pending", "x"});
  client.cmd({"XADD", part(1) + ":flows:outbox", "*", "kind", "settle", "to", part(0), "parent", "broken",
              "child", "y", "state", "done"});
  const FlowIds ids = producer.enqueue_flow(parent);
  Runs runs;
  RunningConsumer rc(partitioned("a"), [&](Consumer& c) {
    c.on("child", [](const Task&) {});
    c.on("parent", [&](const Task& t) { runs.add(t); });
  });
  EXPECT_EQ(producer.wait(ids.task_id, 10s).state, State::done);
  EXPECT_EQ(runs.of(ids.task_id), 1);
  // The foreign entries (a settle for another queue, one of a state that is not final, a
  // placement that is not an enqueue call, a value that is not a placement) are deleted, with an
  // error in the log; the failing one stays, tried again at each pass.
  EXPECT_TRUE(wait_until([&] { return leftovers() == 2; }, 5s)) << leftovers();
  EXPECT_EQ(client.integer({"XLEN", part(1) + ":flows:outbox"}), 1);
  EXPECT_EQ(client.integer({"EXISTS", part(0) + ":flow:broken:pending"}), 1);
}

}  // namespace
}  // namespace streamq::test
