// SPDX-License-Identifier: MIT
// Flows across queues: a child in another queue (FlowNode::queue) is placed there, run by that
// queue's consumers, and its end carried to its parent by their courier; children the producer
// could not place are placed by the home queue's courier; the Inspector, cancel and the
// dashboard's data find such a child in its queue; bad queues are configuration errors.
#include <atomic>
#include <chrono>
#include <string>
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

class QueueFlowsTest : public ConsumerTest {
 protected:
  // The other queue: a name the ACL test's pattern for this queue (`<stream>*`) does not match.
  const std::string other = "other-" + stream;
  Inspector inspector{InspectorOptions{.connection = {.url = server.url()}}};

  ConsumerOptions on(const std::string& queue, const std::string& name, int partitions = 1) const {
    ConsumerOptions o = options();
    o.stream = queue;
    o.partitions = partitions;
    o.consumer_name = name;
    return o;
  }
  State state_in(const std::string& queue, const std::string& id) {
    const auto r = inspector.record(queue, id);
    return r ? r->state : static_cast<State>(-1);
  }
  /// Outbox entries and placements left in these streams, and flow keys left in this queue.
  std::int64_t leftovers(const std::vector<std::string>& streams) {
    std::int64_t n = static_cast<std::int64_t>(client.cmd({"KEYS", stream + ":flow:*"}).view().size());
    for (const std::string& s : streams) {
      n += client.integer({"XLEN", s + ":flows:outbox"}) + client.integer({"HLEN", s + ":flows:placing"});
    }
    return n;
  }
};

TEST_F(QueueFlowsTest, AChordsChildrenInAnotherQueueRunThereAndItsCallbackOnceWithEveryResult) {
  Producer producer = this->producer();
  std::vector<FlowNode> header;
  FlowNode root{.task_type = "sum", .payload = "{}"};
  for (int i = 0; i < 20; ++i) {
    FlowNode child{.task_type = "square", .payload = {{"i", i}}};
    if (i % 2 == 0) child.queue = FlowQueue{.stream = other};
    root.children.push_back(std::move(child));
  }
  const FlowIds ids = producer.enqueue_flow(root);
  // Placed by the producer: each child has its record in its queue before any worker runs.
  for (int i = 0; i < 20; ++i) {
    const std::string& id = ids.children[static_cast<std::size_t>(i)].task_id;
    const std::string& queue = i % 2 == 0 ? other : stream;
    const auto r = inspector.record(queue, id);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->state, State::queued);
    EXPECT_EQ(r->parent, ids.task_id);
    EXPECT_FALSE(inspector.record(i % 2 == 0 ? stream : other, id)) << "in one queue: " << i;
  }
  const TaskRecord waiting = *inspector.record(stream, ids.task_id);
  ASSERT_EQ(waiting.child_queues.size(), 10u);
  EXPECT_EQ(waiting.child_queues.at(ids.children[0].task_id), other);
  EXPECT_EQ(client.integer({"HLEN", stream + ":flows:placing"}), 0) << "the producer took what it placed out";
  Runs here, there;
  RunningConsumer a(on(stream, "a"), [&](Consumer& c) { on_squares(c, here); });
  RunningConsumer b(on(other, "b"), [&](Consumer& c) { on_squares(c, there); });
  EXPECT_EQ(producer.wait(ids.task_id, 20s).state, State::done);
  EXPECT_EQ(here.of(ids.task_id), 1);
  const std::vector<ChildResult> read = here.read_by(ids.task_id);
  ASSERT_EQ(read.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    const std::string& id = ids.children[static_cast<std::size_t>(i)].task_id;
    EXPECT_EQ(read[static_cast<std::size_t>(i)].task_id, id);
    EXPECT_EQ(read[static_cast<std::size_t>(i)].as<int>(), i * i);
    EXPECT_EQ((i % 2 == 0 ? there : here).of(id), 1) << "run once, by its own queue's worker: " << i;
    EXPECT_EQ((i % 2 == 0 ? here : there).of(id), 0) << i;
  }
  // The tree names each child's queue.
  const std::optional<FlowTree> tree = inspector.flow(stream, ids.task_id);
  ASSERT_TRUE(tree);
  EXPECT_EQ(tree->queue, stream);
  ASSERT_EQ(tree->children.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    const FlowTree& c = tree->children[static_cast<std::size_t>(i)];
    EXPECT_EQ(c.queue, i % 2 == 0 ? other : stream) << i;
    ASSERT_TRUE(c.record) << i;
    EXPECT_EQ(c.record->state, State::done) << i;
  }
  EXPECT_TRUE(wait_until([&] { return leftovers({stream, other}) == 0; }, 5s)) << leftovers({stream, other});
}

TEST_F(QueueFlowsTest, AChildThatFailsInAPartitionedQueueFailsItsParentAndItsReplayResumesIt) {
  constexpr int kOtherPartitions = 3;
  Producer producer = this->producer();
  std::atomic<int> attempts{0};
  FlowNode parent{.task_type = "parent", .payload = "{}"};
  parent.children.push_back({.task_type = "flaky",
                             .payload = "{}",
                             .options = {.max_retries = 0, .partition_key = "k"},
                             .queue = FlowQueue{.stream = other, .partitions = kOtherPartitions}});
  parent.children.push_back({.task_type = "ok", .payload = "{}"});
  const FlowIds ids = producer.enqueue_flow(parent);
  Runs runs;
  RunningConsumer a(on(stream, "a"), [&](Consumer& c) { on_flaky_flow(c, runs, attempts); });
  RunningConsumer b(on(other, "b", kOtherPartitions), [&](Consumer& c) { on_flaky_flow(c, runs, attempts); });
  ASSERT_TRUE(wait_until([&] { return state_in(stream, ids.task_id) == State::dead; }, 10s));
  // In the partition of its partition_key (CRC16 mod the partition count, as a producer of that queue).
  const auto child = inspector.record(other, ids.children[0].task_id);
  ASSERT_TRUE(child);
  EXPECT_EQ(child->queue, detail::partition_stream(other, kOtherPartitions,
                                                   static_cast<int>(detail::crc16("k") % kOtherPartitions)));
  const TaskRecord dead = *inspector.record(stream, ids.task_id);
  EXPECT_EQ(dead.reason, "child_failed");
  EXPECT_NE(dead.error.find("first time"), std::string::npos) << dead.error;
  EXPECT_EQ(runs.of(ids.task_id), 0);
  EXPECT_EQ(inspector.replay(other).done, 1);
  ASSERT_TRUE(wait_until([&] { return state_in(stream, ids.task_id) == State::done; }, 10s));
  EXPECT_EQ(runs.of(ids.task_id), 1);
  EXPECT_EQ(runs.results_read_by(ids.task_id), (std::vector<std::string>{"2", "1"}));
  std::vector<std::string> streams{stream};
  for (int i = 0; i < kOtherPartitions; ++i)
    streams.push_back(detail::partition_stream(other, kOtherPartitions, i));
  EXPECT_TRUE(wait_until([&] { return leftovers(streams) == 0; }, 5s)) << leftovers(streams);
}

TEST_F(QueueFlowsTest, CancellingAParentCancelsItsChildInAnotherQueue) {
  Producer producer = this->producer();
  FlowNode parent{.task_type = "parent", .payload = "{}"};
  parent.children.push_back({.task_type = "child", .payload = "{}", .queue = FlowQueue{.stream = other}});
  parent.children.push_back({.task_type = "child", .payload = "{}"});
  const FlowIds ids = producer.enqueue_flow(parent);
  EXPECT_EQ(inspector.cancel(stream, ids.task_id), CancelOutcome::cancelled);
  EXPECT_EQ(state_in(stream, ids.task_id), State::cancelled);
  EXPECT_EQ(state_in(other, ids.children[0].task_id), State::cancelled);
  EXPECT_EQ(state_in(stream, ids.children[1].task_id), State::cancelled);
  EXPECT_EQ(client.integer({"XLEN", other}), 0) << "its entry went with it";
}

TEST_F(QueueFlowsTest, ChildrenTheProducerCouldNotPlaceInAnotherQueueArePlacedByTheHomeQueuesCourier) {
  // A producer that may write only its own queue: the flow is accepted, and its child in the
  // other queue waits in the home's placements, as after a producer that died before placing it.
  client.cmd({"ACL", "SETUSER", "home-only", "on", ">secret", "~" + stream + "*", "+@all"}).view().check();
  Producer limited(
      {.connection = {.url = "redis://home-only:secret@127.0.0.1:" + std::to_string(server.port())},
       .stream = stream});
  FlowNode parent{.task_type = "sum", .payload = "{}"};
  parent.children.push_back(
      {.task_type = "square", .payload = {{"i", 3}}, .queue = FlowQueue{.stream = other}});
  const FlowIds ids = limited.enqueue_flow(parent);
  ASSERT_EQ(client.integer({"HLEN", stream + ":flows:placing"}), 1);
  EXPECT_FALSE(inspector.record(other, ids.children[0].task_id)) << "not placed yet";
  // Aged past the courier's grace (each value starts with `<length>:<ms>`, the time written).
  const detail::Reply r = client.cmd({"HGETALL", stream + ":flows:placing"});
  const std::string token(r.view()[0].str()), value(r.view()[1].str());
  const std::size_t colon = value.find(':');
  const std::size_t end = colon + 1 + std::stoul(value.substr(0, colon));
  const std::string at = std::to_string(std::stoll(value.substr(colon + 1, end - colon - 1)) - 60000);
  client.cmd(
      {"HSET", stream + ":flows:placing", token, std::to_string(at.size()) + ":" + at + value.substr(end)});
  Runs here, there;
  RunningConsumer a(on(stream, "a"), [&](Consumer& c) { on_squares(c, here); });
  RunningConsumer b(on(other, "b"), [&](Consumer& c) { on_squares(c, there); });
  Producer waiter = producer();
  EXPECT_EQ(waiter.wait(ids.task_id, 15s).state, State::done);
  EXPECT_EQ(there.of(ids.children[0].task_id), 1);
  EXPECT_EQ(here.results_read_by(ids.task_id), (std::vector<std::string>{"9"}));
  EXPECT_TRUE(wait_until([&] { return leftovers({stream, other}) == 0; }, 5s)) << leftovers({stream, other});
}

TEST_F(QueueFlowsTest, BadQueuesAreConfigErrors) {
  Producer producer = this->producer();
  // (Valid payloads: what each refusal is about is the queue.)
  const auto flow_with = [&](FlowNode child) {
    child.payload = "{}";
    for (FlowNode& c : child.children) c.payload = "{}";
    FlowNode parent{.task_type = "parent", .payload = "{}"};
    parent.children.push_back(std::move(child));
    return parent;
  };
  EXPECT_THROW(producer.enqueue_flow(flow_with({.task_type = "c", .queue = FlowQueue{}})), ConfigError);
  EXPECT_THROW(producer.enqueue_flow(flow_with({.task_type = "c", .queue = FlowQueue{other, 0}})),
               ConfigError);
  EXPECT_THROW(producer.enqueue_flow(flow_with({.task_type = "c", .queue = FlowQueue{stream, 2}})),
               ConfigError)
      << "the producer's own queue, with other partitions";
  FlowNode parent_elsewhere{.task_type = "p", .queue = FlowQueue{other}};
  parent_elsewhere.children.push_back({.task_type = "c"});
  EXPECT_THROW(producer.enqueue_flow(flow_with(parent_elsewhere)), ConfigError)
      << "a parent in another queue";
  FlowNode root_elsewhere{.task_type = "r", .payload = "{}", .queue = FlowQueue{other}};
  root_elsewhere.children.push_back({.task_type = "c", .payload = "{}"});
  EXPECT_THROW(producer.enqueue_flow(root_elsewhere), ConfigError) << "the root in another queue";
  EXPECT_THROW(producer.enqueue_flow(
                   flow_with({.task_type = "c", .options = {.unique_for = 1min}, .queue = FlowQueue{other}})),
               ConfigError);
  EXPECT_EQ(client.integer({"EXISTS", stream, other}), 0) << "nothing was written";
  // The producer's own queue named: the same as not naming one.
  const FlowIds ids = producer.enqueue_flow(flow_with({.task_type = "c", .queue = FlowQueue{stream}}));
  EXPECT_EQ(state_in(stream, ids.children[0].task_id), State::queued);
  EXPECT_TRUE(inspector.record(stream, ids.task_id)->child_queues.empty());
}

}  // namespace
}  // namespace streamq::test
