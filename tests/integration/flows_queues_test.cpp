// SPDX-License-Identifier: MIT
// Flows across queues: a child in another queue (FlowNode::queue) is placed there, run by that
// queue's consumers, and its end carried to its parent by their courier; children the producer
// could not place are placed by the home queue's courier; the Inspector and cancel find such a
// child in its queue, and its record its parent's; an end written by hand in a queue the parent
// did not send its child to is not applied; a worker whose ACL user may not run the courier
// runs without it; bad queues are configuration errors.
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "flow_runs.hpp"
#include "log_capture.hpp"
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
  /// A chord of `n` "square" tasks (payload i) and its "sum", every `nth` task (i % nth == 0)
  /// in the other queue.
  FlowNode squares(int n, int nth) const {
    FlowNode root{.task_type = "sum", .payload = "{}"};
    for (int i = 0; i < n; ++i) {
      FlowNode child{.task_type = "square", .payload = {{"i", i}}};
      if (i % nth == 0) child.queue = FlowQueue{.stream = other};
      root.children.push_back(std::move(child));
    }
    return root;
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
  const FlowIds ids = producer.enqueue_flow(squares(20, 2));
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
  EXPECT_EQ(inspector.record(other, ids.children[0].task_id)->parent_queue, stream) << "its parent's queue";
  EXPECT_EQ(inspector.record(stream, ids.children[1].task_id)->parent_queue, "") << "beside its parent";
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
  // (Its consumer names the queue without braces: the same partitioned queue, {<name>:i}.)
  RunningConsumer b(on(detail::partition_base(other), "b", kOtherPartitions),
                    [&](Consumer& c) { on_flaky_flow(c, runs, attempts); });
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
  // Its cancelled end is carried home, where nothing waits for it any more: no error.
  ASSERT_EQ(client.integer({"XLEN", other + ":flows:outbox"}), 1);
  LogCapture log(LogLevel::info);
  {
    RunningConsumer b(on(other, "b"), [](Consumer& c) { c.on("child", [](const Task&) {}); });
    EXPECT_TRUE(wait_until([&] { return client.integer({"XLEN", other + ":flows:outbox"}) == 0; }, 10s));
  }
  EXPECT_EQ(log.count(LogLevel::error, ""), 0U);
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

// A partitioned home: the parent in its root's partition, children beside it, in its other
// partitions and in another queue; each end carried home, the callback run once with all.
TEST_F(QueueFlowsTest, APartitionedHomeWithChildrenInAnotherQueue) {
  constexpr int kPartitions = 3;
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .partitions = kPartitions});
  const FlowIds ids = producer.enqueue_flow(squares(12, 3));
  Runs here, there;
  ConsumerOptions home = on(stream, "a", kPartitions);
  home.concurrency = 2 * kPartitions;
  RunningConsumer a(home, [&](Consumer& c) { on_squares(c, here); });
  RunningConsumer b(on(other, "b"), [&](Consumer& c) { on_squares(c, there); });
  EXPECT_EQ(producer.wait(ids.task_id, 20s).state, State::done);
  EXPECT_EQ(here.of(ids.task_id), 1);
  const std::vector<ChildResult> read = here.read_by(ids.task_id);
  ASSERT_EQ(read.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(read[static_cast<std::size_t>(i)].as<int>(), i * i);
    EXPECT_EQ((i % 3 == 0 ? there : here).of(ids.children[static_cast<std::size_t>(i)].task_id), 1) << i;
  }
  const auto child = inspector.record(other, ids.children[0].task_id);
  ASSERT_TRUE(child);
  EXPECT_EQ(child->parent_queue, inspector.record(stream, ids.task_id)->queue) << "its parent's partition";
  EXPECT_EQ(inspector.record(child->parent_queue, ids.task_id)->state, State::done);
  std::vector<std::string> streams{other};
  for (int p = 0; p < kPartitions; ++p) streams.push_back(detail::partition_stream(stream, kPartitions, p));
  EXPECT_TRUE(wait_until([&] { return leftovers(streams) == 0; }, 5s)) << leftovers(streams);
}

// An outbox entry in a queue the parent did not send that child to (written by hand, or by a
// producer of that queue) is deleted unapplied; the parent waits on, and ends with its child.
TEST_F(QueueFlowsTest, AnEndFromAQueueTheParentDidNotSendItsChildToIsNotApplied) {
  Producer producer = this->producer();
  FlowNode parent{.task_type = "sum", .payload = "{}"};
  parent.children.push_back(
      {.task_type = "square", .payload = {{"i", 2}}, .queue = FlowQueue{.stream = other}});
  parent.children.push_back({.task_type = "square", .payload = {{"i", 5}}});
  const FlowIds ids = producer.enqueue_flow(parent);
  const std::string third = "third-" + stream;
  // An end of each child, from a third queue: one the parent sent elsewhere, one it kept.
  for (const FlowIds& c : ids.children) {
    client.cmd({"XADD", third + ":flows:outbox", "*", "kind", "settle", "to", stream, "parent", ids.task_id,
                "child", c.task_id, "state", "done", "policy", "fail", "result", "666", "error", ""});
  }
  Runs faked;
  RunningConsumer c(on(third, "c"), [&](Consumer& consumer) { on_squares(consumer, faked); });
  ASSERT_TRUE(wait_until([&] { return client.integer({"XLEN", third + ":flows:outbox"}) == 0; }, 10s));
  EXPECT_EQ(state_in(stream, ids.task_id), State::waiting);
  EXPECT_EQ(client.integer({"SCARD", stream + ":flow:" + ids.task_id + ":pending"}), 2) << "nothing applied";
  Runs here, there;
  RunningConsumer a(on(stream, "a"), [&](Consumer& consumer) { on_squares(consumer, here); });
  RunningConsumer b(on(other, "b"), [&](Consumer& consumer) { on_squares(consumer, there); });
  EXPECT_EQ(producer.wait(ids.task_id, 20s).state, State::done);
  EXPECT_EQ(here.results_read_by(ids.task_id), (std::vector<std::string>{"4", "25"}));
}

// A worker whose ACL user has none of the courier's grants (as the ACL lines before flows across
// partitions): it says so once and runs without the courier; its delayed tasks are forwarded.
TEST_F(QueueFlowsTest, AWorkerThatMayNotRunTheCourierRunsWithoutIt) {
  client
      .cmd({"ACL", "SETUSER", "old-worker", "on", ">secret", "~" + stream, "~" + stream + ":p:*",
            "~" + stream + ":dlq", "~" + stream + ":delayed", "~" + stream + ":forwarder",
            "~" + stream + ":live:*", "~" + stream + ":paused", "~" + stream + ":orphan:*",
            "~" + stream + ":cancel:*", "~" + stream + ":cancels", "+@all", "-hlen", "-hscan"})
      .view()
      .check();
  Producer producer = this->producer();
  ConsumerOptions o = on(stream, "old");
  o.connection.url = "redis://old-worker:secret@127.0.0.1:" + std::to_string(server.port());
  std::atomic<int> runs{0};
  LogCapture log(LogLevel::info);
  {
    RunningConsumer worker(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++runs; }); });
    producer.enqueue("t", "{}", {.delay = 300ms});
    ASSERT_TRUE(wait_until([&] { return runs.load() == 1; }, 10s));
    // (The forwarder counts a move after its script answered, and the task can run before that:
    // stopping the worker joins the forwarder, so its count is final.)
    worker.stop();
    EXPECT_EQ(worker.consumer().metrics().forwarded, 1U);
  }
  // (Some 10 forwarder passes ran meanwhile: a failing courier would have failed each.)
  EXPECT_EQ(log.count(LogLevel::warning, "flow courier of " + stream + " off"), 1U);
  EXPECT_EQ(log.count(LogLevel::error, ""), 0U) << "the forwarder's passes did not fail";
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
  EXPECT_EQ(client.cmd({"KEYS", "*" + stream + "*"}).view().size(), 0u) << "nothing was written";
  EXPECT_THROW(producer.enqueue_flow(flow_with({.task_type = "c", .queue = FlowQueue{other, 0}})),
               ConfigError);
  EXPECT_THROW(producer.enqueue_flow(flow_with({.task_type = "c", .queue = FlowQueue{other, 100000}})),
               ConfigError);
  FlowNode two_counts{.task_type = "parent", .payload = "{}"};
  two_counts.children.push_back({.task_type = "c", .payload = "{}", .queue = FlowQueue{other, 2}});
  two_counts.children.push_back({.task_type = "c", .payload = "{}", .queue = FlowQueue{other, 3}});
  EXPECT_THROW(producer.enqueue_flow(two_counts), ConfigError) << "one queue, two partition counts";
  Producer partitioned({.connection = {.url = server.url()}, .stream = stream, .partitions = 4});
  EXPECT_THROW(partitioned.enqueue_flow(
                   flow_with({.task_type = "c", .queue = FlowQueue{detail::partition_stream(stream, 4, 2)}})),
               ConfigError)
      << "a partition of its own queue";
  // The producer's own queue named: the same as not naming one.
  const FlowIds ids = producer.enqueue_flow(flow_with({.task_type = "c", .queue = FlowQueue{stream}}));
  EXPECT_EQ(state_in(stream, ids.children[0].task_id), State::queued);
  EXPECT_TRUE(inspector.record(stream, ids.task_id)->child_queues.empty());
}

}  // namespace
}  // namespace streamq::test
