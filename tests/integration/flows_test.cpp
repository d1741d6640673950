// SPDX-License-Identifier: MIT
// Flows (Producer::enqueue_flow, chain, chord): a parent runs once, after all its children
// finished, with their results; each failure policy; a replayed dead child resumes its flow; a
// flow is written whole or not at all.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "flow_runs.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;
using State = TaskRecord::State;

class FlowsTest : public ConsumerTest {
 protected:
  Inspector inspector{InspectorOptions{.connection = {.url = server.url()}}};
  Producer shared = producer();

  State state_of(const std::string& id) {
    const auto r = inspector.record(stream, id);
    return r ? r->state : static_cast<State>(-1);
  }
  /// Entries of a batch's callbacks (task types "complete", "success") in the stream.
  int callbacks_in_stream() {
    int n = 0;
    for (const auto& [id, fields] : client.xrange(stream)) {
      const std::string type = Client::get(fields, "task_type");
      n += type == "complete" || type == "success";
    }
    return n;
  }
  /// The flow keys left in Redis (`<stream>:flow:*`).
  std::int64_t flow_keys() {
    return static_cast<std::int64_t>(client.cmd({"KEYS", stream + ":flow:*"}).view().size());
  }
};

TEST_F(FlowsTest, AChainRunsInOrderAndEachTaskReadsTheResultOfTheOneBefore) {
  const FlowIds ids = shared.enqueue_flow(chain({{.task_type = "add", .payload = {{"n", 1}}},
                                                 {.task_type = "add", .payload = {{"n", 10}}},
                                                 {.task_type = "add", .payload = {{"n", 100}}}}));
  // The root is the last task; it waits for the second, which waits for the first.
  ASSERT_EQ(ids.children.size(), 1u);
  ASSERT_EQ(ids.children[0].children.size(), 1u);
  EXPECT_EQ(state_of(ids.task_id), State::waiting);
  EXPECT_EQ(state_of(ids.children[0].task_id), State::waiting);
  EXPECT_EQ(state_of(ids.children[0].children[0].task_id), State::queued);
  std::mutex mutex;
  std::vector<int> seen;  // the sum each task computed, in the order they ran
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("add", [&](const Task& t) {
      int sum = t.json()["n"].get<int>();
      for (const ChildResult& r : t.children_results()) sum += r.as<int>();
      std::lock_guard lock(mutex);
      seen.push_back(sum);
      t.set_result(std::to_string(sum));
    });
  });
  const TaskRecord root = shared.wait(ids.task_id, 10s);
  EXPECT_EQ(root.state, State::done);
  EXPECT_EQ(root.result.value_or(""), "111");
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<int>{1, 11, 111}));
  EXPECT_EQ(flow_keys(), 0);
}

TEST_F(FlowsTest, AThousandChildFanOutRunsItsParentOnceWithEveryResultInOrder) {
  std::vector<TaskSpec> header;
  for (int i = 0; i < 1000; ++i) header.push_back({.task_type = "square", .payload = {{"i", i}}});
  const FlowIds ids =
      shared.enqueue_flow(chord(std::move(header), {.task_type = "sum", .payload = {{"k", 0}}}));
  ASSERT_EQ(ids.children.size(), 1000u);
  Runs runs;
  auto o = options();
  o.concurrency = 8;
  auto setup = [&](Consumer& c) { on_squares(c, runs); };
  o.consumer_name = "a";
  RunningConsumer a(o, setup);
  o.consumer_name = "b";
  RunningConsumer b(o, setup);
  EXPECT_EQ(shared.wait(ids.task_id, 30s).state, State::done);
  EXPECT_EQ(runs.of(ids.task_id), 1);
  const std::vector<ChildResult> read = runs.read_by(ids.task_id);
  ASSERT_EQ(read.size(), 1000u);
  for (std::size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].task_id, ids.children[i].task_id);
    EXPECT_TRUE(read[i].succeeded());
    EXPECT_EQ(read[i].as<int>(), static_cast<int>(i * i));
    EXPECT_EQ(runs.of(ids.children[i].task_id), 1);
  }
  EXPECT_EQ(flow_keys(), 0);
}

TEST_F(FlowsTest, TheLastTwoChildrenFinishingTogetherOnTwoWorkersEnqueueTheParentExactlyOnce) {
  // 200 flows of two children each, run by two consumers: the two children of a flow are often
  // finished at the same instant by both. Each parent must run once.
  std::vector<FlowIds> flows;
  for (int i = 0; i < 200; ++i) {
    flows.push_back(shared.enqueue_flow(
        chord({{.task_type = "child", .payload = "{}"}, {.task_type = "child", .payload = "{}"}},
              {.task_type = "parent", .payload = "{}"})));
  }
  Runs runs;
  auto o = options();
  o.concurrency = 4;
  auto setup = [&](Consumer& c) {
    c.on("child", [&](const Task& t) { t.set_result(R"("ok")"); });
    c.on("parent", [&](const Task& t) { runs.add(t); });
  };
  o.consumer_name = "a";
  RunningConsumer a(o, setup);
  o.consumer_name = "b";
  RunningConsumer b(o, setup);
  for (const FlowIds& f : flows) ASSERT_EQ(shared.wait(f.task_id, 20s).state, State::done);
  a.stop();
  b.stop();
  for (const FlowIds& f : flows) {
    EXPECT_EQ(runs.of(f.task_id), 1) << f.task_id;
    EXPECT_EQ(runs.read_by(f.task_id).size(), 2u);
  }
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(flow_keys(), 0);
}

TEST_F(FlowsTest, AFailedChildFailsItsParentAndItsGrandparentByDefault) {
  FlowNode leaf{.task_type = "fails", .payload = "{}", .options = {.max_retries = 0}};
  FlowNode middle{
      .task_type = "ok", .payload = "{}", .children = {leaf, FlowNode{.task_type = "ok", .payload = "{}"}}};
  const FlowIds ids = shared.enqueue_flow(FlowNode{.task_type = "ok", .payload = "{}", .children = {middle}});
  Runs runs;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("fails", [](const Task&) { throw std::runtime_error("boom"); });
    c.on("ok", [&](const Task& t) { runs.add(t); });
  });
  const std::string middle_id = ids.children[0].task_id;
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::dead; }, 10s));
  const TaskRecord root = *inspector.record(stream, ids.task_id);
  EXPECT_EQ(root.reason, "child_failed");
  EXPECT_NE(root.error.find(middle_id), std::string::npos) << root.error;
  const auto middle_record = inspector.record(stream, middle_id);
  ASSERT_TRUE(middle_record);
  EXPECT_EQ(middle_record->state, State::dead);
  EXPECT_EQ(middle_record->reason, "child_failed");
  EXPECT_NE(middle_record->error.find("boom"), std::string::npos) << middle_record->error;
  // The other child ran; neither parent did.
  EXPECT_TRUE(wait_until([&] { return runs.of(ids.children[0].children[1].task_id) == 1; }, 5s));
  EXPECT_EQ(runs.of(middle_id), 0);
  EXPECT_EQ(runs.of(ids.task_id), 0);
}

TEST_F(FlowsTest, AnIgnoredFailureIsReadByTheParentAndARemovedOneIsNot) {
  FlowNode parent{.task_type = "parent", .payload = "{}"};
  parent.children.push_back({.task_type = "ok", .payload = "{}"});
  parent.children.push_back({.task_type = "fails",
                             .payload = "{}",
                             .options = {.max_retries = 0},
                             .on_failure = ChildFailure::ignore});
  parent.children.push_back({.task_type = "fails",
                             .payload = "{}",
                             .options = {.max_retries = 0},
                             .on_failure = ChildFailure::remove});
  const FlowIds ids = shared.enqueue_flow(parent);
  Runs runs;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("ok", [](const Task& t) { t.set_result("1"); });
    c.on("fails", [](const Task&) { throw std::runtime_error("no luck"); });
    c.on("parent", [&](const Task& t) { runs.add(t); });
  });
  EXPECT_EQ(shared.wait(ids.task_id, 10s).state, State::done);
  const std::vector<ChildResult> read = runs.read_by(ids.task_id);
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].task_id, ids.children[0].task_id);
  EXPECT_TRUE(read[0].succeeded());
  EXPECT_EQ(read[0].result, "1");
  EXPECT_EQ(read[1].task_id, ids.children[1].task_id);
  EXPECT_EQ(read[1].state, "dead");
  EXPECT_NE(read[1].error.find("no luck"), std::string::npos) << read[1].error;
}

TEST_F(FlowsTest, AReplayedDeadChildResumesItsFlow) {
  std::atomic<int> attempts{0};
  FlowNode parent{.task_type = "parent", .payload = "{}"};
  parent.children.push_back({.task_type = "flaky", .payload = "{}", .options = {.max_retries = 0}});
  parent.children.push_back({.task_type = "ok", .payload = "{}"});
  const FlowIds ids = shared.enqueue_flow(parent);
  Runs runs;
  RunningConsumer rc(options(), [&](Consumer& c) { on_flaky_flow(c, runs, attempts); });
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::dead; }, 10s));
  EXPECT_EQ(runs.of(ids.task_id), 0);
  EXPECT_EQ(inspector.replay(stream).done, 1);
  EXPECT_EQ(inspector.record(stream, ids.children[0].task_id)->parent, ids.task_id)
      << "a replay keeps its link";
  // (Producer::wait would answer at once: the parent's record says dead until the replayed
  // child's end enqueues it.)
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::done; }, 10s));
  EXPECT_EQ(runs.of(ids.task_id), 1);
  EXPECT_EQ(runs.results_read_by(ids.task_id), (std::vector<std::string>{"2", "1"}));
  EXPECT_EQ(flow_keys(), 0);
}

TEST_F(FlowsTest, AFlowIsWrittenWholeOrNotAtAll) {
  Producer small({.connection = {.url = server.url()}, .stream = stream, .max_len = 5});
  std::vector<TaskSpec> header(6, TaskSpec{.task_type = "t", .payload = "{}"});
  EXPECT_THROW(small.enqueue_flow(chord(header, {.task_type = "t", .payload = "{}"})), QueueFullError);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(flow_keys(), 0);
  EXPECT_EQ(client.cmd({"KEYS", stream + ":task:*"}).view().size(), 0u);
  header.resize(3);
  const FlowIds ids = small.enqueue_flow(chord(header, {.task_type = "t", .payload = "{}"}));
  EXPECT_EQ(xlen(stream), 3);
  EXPECT_EQ(state_of(ids.task_id), State::waiting);
}

TEST_F(FlowsTest, BadFlowsAreRefusedBeforeAnythingIsWritten) {
  FlowNode delayed_parent{.task_type = "p", .payload = "{}", .options = {.delay = 1s}};
  delayed_parent.children.push_back({.task_type = "c", .payload = "{}"});
  EXPECT_THROW(shared.enqueue_flow(delayed_parent), ConfigError);
  FlowNode twice{.task_type = "p", .payload = "{}", .options = {.task_id = "x"}};
  twice.children.push_back({.task_type = "c", .payload = "{}", .options = {.task_id = "x"}});
  EXPECT_THROW(shared.enqueue_flow(twice), ConfigError);
  EXPECT_THROW(chain({}), ConfigError);
  EXPECT_THROW(chord({}, {.task_type = "p", .payload = "{}"}), ConfigError);
  FlowNode bad_payload{.task_type = "p", .payload = "{}"};
  bad_payload.children.push_back({.task_type = "c", .payload = "not json"});
  EXPECT_THROW(shared.enqueue_flow(bad_payload), PayloadError);
  // trim_oldest could drop a child unfinished (its parent would wait forever); in a partitioned
  // queue a unique child's lock would not be in its unique key's partition.
  Producer trimming(
      {.connection = {.url = server.url()}, .stream = stream, .overflow = Overflow::trim_oldest});
  EXPECT_THROW(trimming.enqueue_flow(
                   chord({{.task_type = "c", .payload = "{}"}}, {.task_type = "p", .payload = "{}"})),
               ConfigError);
  Producer partitioned({.connection = {.url = server.url()}, .stream = stream, .partitions = 2});
  EXPECT_THROW(
      partitioned.enqueue_flow(chord({{.task_type = "c", .payload = "{}", .options = {.unique_for = 1min}}},
                                     {.task_type = "p", .payload = "{}"})),
      ConfigError);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(flow_keys(), 0);
}

TEST_F(FlowsTest, CancellingAWaitingParentCancelsItsUnfinishedChildrenAndItNeverRuns) {
  FlowNode parent{.task_type = "parent", .payload = "{}"};
  parent.children.push_back({.task_type = "ok", .payload = "{}"});
  parent.children.push_back({.task_type = "ok", .payload = "{}", .options = {.delay = 1h}});
  FlowNode grandchild_parent{.task_type = "ok", .payload = "{}"};
  grandchild_parent.children.push_back({.task_type = "ok", .payload = "{}", .options = {.delay = 1h}});
  parent.children.push_back(grandchild_parent);
  const FlowIds ids = shared.enqueue_flow(parent);
  Runs runs;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("ok", [&](const Task& t) { runs.add(t); });
    c.on("parent", [&](const Task& t) { runs.add(t); });
  });
  ASSERT_TRUE(wait_until([&] { return state_of(ids.children[0].task_id) == State::done; }, 10s));
  EXPECT_EQ(inspector.cancel(stream, ids.task_id), CancelOutcome::cancelled);
  EXPECT_EQ(state_of(ids.task_id), State::cancelled);
  EXPECT_EQ(state_of(ids.children[0].task_id), State::done);
  EXPECT_EQ(state_of(ids.children[1].task_id), State::cancelled);
  EXPECT_EQ(state_of(ids.children[2].task_id), State::cancelled);
  EXPECT_EQ(state_of(ids.children[2].children[0].task_id), State::cancelled);
  EXPECT_EQ(flow_keys(), 0);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0);
  EXPECT_EQ(runs.of(ids.task_id), 0);
  // Cancelled already: nothing more to cancel.
  EXPECT_EQ(inspector.cancel(stream, ids.task_id), CancelOutcome::missing);
}

TEST_F(FlowsTest, TheInspectorShowsAFlowAsATreeWithEachTasksState) {
  FlowNode middle{.task_type = "sum", .payload = "{}"};
  middle.children.push_back({.task_type = "leaf", .payload = "{}"});
  middle.children.push_back({.task_type = "leaf", .payload = "{}", .options = {.delay = 1h}});
  FlowNode root{.task_type = "report", .payload = "{}"};
  root.children.push_back(middle);
  root.children.push_back({.task_type = "leaf", .payload = "{}"});
  const FlowIds ids = shared.enqueue_flow(root);
  const std::optional<FlowTree> tree = inspector.flow(stream, ids.task_id);
  ASSERT_TRUE(tree);
  ASSERT_TRUE(tree->record);
  EXPECT_EQ(tree->record->state, State::waiting);
  EXPECT_EQ(tree->record->children,
            (std::vector<std::string>{ids.children[0].task_id, ids.children[1].task_id}));
  ASSERT_EQ(tree->children.size(), 2u);
  const FlowTree& sum = tree->children[0];
  EXPECT_EQ(sum.task_id, ids.children[0].task_id);
  ASSERT_TRUE(sum.record);
  EXPECT_EQ(sum.record->task_type, "sum");
  EXPECT_EQ(sum.record->state, State::waiting);
  EXPECT_EQ(sum.record->parent, ids.task_id);
  ASSERT_EQ(sum.children.size(), 2u);
  EXPECT_EQ(sum.children[0].record->state, State::queued);
  EXPECT_EQ(sum.children[1].record->state, State::delayed);
  EXPECT_TRUE(sum.children[1].children.empty());
  EXPECT_EQ(tree->children[1].record->state, State::queued);
  EXPECT_EQ(tree->children[1].record->parent, ids.task_id);
  // Any task of the flow is a tree's top; one without a record is none.
  EXPECT_EQ(inspector.flow(stream, ids.children[0].task_id)->children.size(), 2u);
  EXPECT_FALSE(inspector.flow(stream, "no-such-task"));
}

TEST_F(FlowsTest, AGroupIsAwaitedByItsIdAndEndsWithItsTasksOutcomesWithoutRunning) {
  FlowNode tolerant = group({{.task_type = "ok", .payload = {{"n", 1}}},
                             {.task_type = "boom", .payload = "{}", .options = {.max_retries = 0}},
                             {.task_type = "ok", .payload = {{"n", 3}}}},
                            ChildFailure::ignore);
  tolerant.options.task_id = "tolerant-group";
  const FlowIds ids = shared.enqueue_flow(tolerant);
  EXPECT_EQ(ids.task_id, "tolerant-group");
  const FlowIds strict =
      shared.enqueue_flow(group({{.task_type = "ok", .payload = {{"n", 4}}},
                                 {.task_type = "boom", .payload = "{}", .options = {.max_retries = 0}}}));
  EXPECT_EQ(state_of(ids.task_id), State::waiting);
  EXPECT_TRUE(group_results(*inspector.record(stream, ids.task_id)).empty()) << "nothing while it waits";
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("ok", [](const Task& t) { t.set_result(std::to_string(t.json()["n"].get<int>())); });
    c.on("boom", [](const Task&) { throw std::runtime_error("boom"); });
  });
  const TaskRecord done = shared.wait(ids.task_id, 10s);
  EXPECT_EQ(done.state, State::done);
  EXPECT_EQ(done.task_type, group_task_type);
  const std::vector<ChildResult> results = group_results(done);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].as<int>(), 1);
  EXPECT_EQ(results[1].state, "dead");
  EXPECT_NE(results[1].error.find("boom"), std::string::npos) << results[1].error;
  EXPECT_EQ(results[2].as<int>(), 3);
  EXPECT_THROW(shared.wait(strict.task_id, 10s), TaskFailedError);
  EXPECT_EQ(inspector.record(stream, strict.task_id)->reason, "child_failed");
  int strict_failures = 0;  // the failure that failed it is one of its child_ended events too
  for (const QueueEvent& e : inspector.events(stream, "", 1000).events) {
    if (e.event != "child_ended" || e.task_id != strict.task_id) continue;
    for (const auto& [name, value] : e.fields) strict_failures += name == "state" && value == "dead";
  }
  EXPECT_EQ(strict_failures, 1);
  // Neither root ran: no entry of the group's type was ever added, nothing was dead-lettered
  // but the failing tasks.
  EXPECT_EQ(xlen(dlq), 2);
  for (const auto& [id, fields] : client.xrange(stream))
    EXPECT_NE(Client::get(fields, "task_type"), group_task_type);
  // Each end of a task is an event of the group's: child_ended, with what is left.
  std::vector<std::string> left;
  for (const QueueEvent& e : inspector.events(stream, "", 1000).events) {
    if (e.event != "child_ended" || e.task_id != ids.task_id) continue;
    for (const auto& [name, value] : e.fields) {
      if (name == "pending") left.push_back(value);
    }
  }
  EXPECT_EQ(left, (std::vector<std::string>{"2", "1", "0"}));
  EXPECT_THROW(group_results(*inspector.record(stream, ids.children[0].task_id)), ConfigError);
  EXPECT_THROW(group({}), ConfigError);
}

TEST_F(FlowsTest, AGroupInAFlowThatFailedAndResumesReleasesItsParent) {
  std::atomic<int> attempts{0};
  FlowNode root{.task_type = "parent", .payload = "{}"};
  root.children.push_back(group({{.task_type = "ok", .payload = "{}"},
                                 {.task_type = "flaky", .payload = "{}", .options = {.max_retries = 0}}}));
  const FlowIds ids = shared.enqueue_flow(root);
  const std::string group_id = ids.children[0].task_id;
  Runs runs;
  RunningConsumer rc(options(), [&](Consumer& c) { on_flaky_flow(c, runs, attempts); });
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::dead; }, 10s));
  EXPECT_EQ(state_of(group_id), State::dead);
  EXPECT_EQ(inspector.replay(stream).done, 1);
  // The group ends done (from dead), and its parent learns it: it runs with the group's outcome.
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::done; }, 10s));
  EXPECT_EQ(state_of(group_id), State::done);
  EXPECT_EQ(runs.of(ids.task_id), 1);
  const std::vector<ChildResult> read = runs.read_by(ids.task_id);
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].task_id, group_id);
  EXPECT_EQ(group_results(*inspector.record(stream, group_id)).size(), 2u);
  EXPECT_EQ(flow_keys(), 0);
}

TEST_F(FlowsTest, AFailedParentsFlowLivesAsLongAsItsRecord) {
  const Retention kept{.done = 1min, .dead = 1min};
  FlowNode parent{.task_type = "parent", .payload = "{}", .options = {.retention = kept}};
  parent.children.push_back(
      {.task_type = "fails", .payload = "{}", .options = {.max_retries = 0, .retention = kept}});
  parent.children.push_back({.task_type = "slow", .payload = "{}", .options = {.retention = kept}});
  const FlowIds ids = shared.enqueue_flow(parent);
  std::atomic<bool> go{false};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("fails", [](const Task&) { throw std::runtime_error("no"); });
    c.on("slow", [&](const Task& t) {
      EXPECT_TRUE(wait_until([&] { return go.load(); }, 10s));
      t.set_result("1");
    });
  });
  ASSERT_TRUE(wait_until([&] { return state_of(ids.task_id) == State::dead; }, 10s));
  go = true;  // the other child ends after its parent died: its result is the flow's last write
  ASSERT_TRUE(wait_until([&] { return state_of(ids.children[1].task_id) == State::done; }, 10s));
  const std::string flow = stream + ":flow:" + ids.task_id;
  for (const std::string& key : {flow, flow + ":pending", flow + ":results"}) {
    const std::int64_t ttl = client.integer({"PTTL", key});
    EXPECT_GT(ttl, 0) << key << " (its record's retention: a minute)";
    EXPECT_LE(ttl, 60000) << key;
  }
}

using BatchesTest = FlowsTest;

TEST_F(BatchesTest, ABatchThatGrowsWhileItsTasksFinishFiresOnCompleteOnceAfterItsClose) {
  const std::string batch =
      shared.open_batch({.on_complete = TaskSpec{.task_type = "complete", .payload = "{}"},
                         .on_success = TaskSpec{.task_type = "success", .payload = "{}"}});
  Runs runs;
  std::atomic<int> completes{0}, successes{0}, members{0};
  std::string seen_batch;
  std::mutex mutex;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("member", [&](const Task&) { ++members; });
    c.on("complete", [&](const Task& t) {
      ++completes;
      std::lock_guard lock(mutex);
      seen_batch = std::string(t.field(field::batch_id).value_or(""));
    });
    c.on("success", [&](const Task&) { ++successes; });
  });
  Producer other = producer();  // tasks join from any producer
  for (int i = 0; i < 50; ++i) shared.enqueue("member", "{}", {.batch = batch});
  ASSERT_TRUE(wait_until([&] { return members.load() == 50; }, 10s));
  // Every task so far finished: the batch is open, so nothing fired (firing makes it "fired").
  EXPECT_EQ(inspector.batch(stream, batch)->state, "open");
  EXPECT_EQ(completes.load(), 0);
  std::vector<TaskSpec> more(50,
                             TaskSpec{.task_type = "member", .payload = "{}", .options = {.batch = batch}});
  other.enqueue_batch(more);
  EXPECT_TRUE(shared.close_batch(batch));
  EXPECT_FALSE(shared.close_batch(batch));
  ASSERT_TRUE(wait_until([&] { return completes.load() == 1 && successes.load() == 1; }, 10s));
  rc.stop();
  // A second callback would have run, or wait in the stream.
  EXPECT_EQ(callbacks_in_stream(), 0);
  EXPECT_EQ(completes.load(), 1);
  EXPECT_EQ(successes.load(), 1);
  EXPECT_EQ(members.load(), 100);
  const std::optional<BatchInfo> info = inspector.batch(stream, batch);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->state, "fired");
  EXPECT_EQ(info->total, 100);
  EXPECT_EQ(info->done, 100);
  EXPECT_EQ(info->failed, 0);
  EXPECT_EQ(info->pending(), 0);
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen_batch, batch);
}

TEST_F(BatchesTest, AFailedMemberFiresOnCompleteButNotOnSuccess) {
  const std::string batch =
      shared.open_batch({.on_complete = TaskSpec{.task_type = "complete", .payload = "{}"},
                         .on_success = TaskSpec{.task_type = "success", .payload = "{}"}});
  shared.enqueue("ok", "{}", {.batch = batch});
  shared.enqueue("fails", "{}", {.max_retries = 1, .batch = batch});  // a retry does not end it
  // The same task enqueued again while unfinished (a retry after a lost reply) is one member:
  // it runs twice, and its first end is counted.
  shared.enqueue("ok", "{}", {.task_id = "again", .batch = batch});
  shared.enqueue("ok", "{}", {.task_id = "again", .batch = batch});
  shared.close_batch(batch);
  std::atomic<int> completes{0}, successes{0}, failures{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("ok", [](const Task&) {});
    c.on("fails", [&](const Task&) {
      ++failures;
      throw std::runtime_error("no");
    });
    c.on("complete", [&](const Task&) { ++completes; });
    c.on("success", [&](const Task&) { ++successes; });
  });
  ASSERT_TRUE(wait_until([&] { return completes.load() == 1; }, 10s));
  EXPECT_EQ(failures.load(), 2);
  rc.stop();
  EXPECT_EQ(callbacks_in_stream(), 0) << "no on_success waits in the stream either";
  EXPECT_EQ(successes.load(), 0);
  const BatchInfo info = *inspector.batch(stream, batch);
  EXPECT_EQ(info.state, "fired");
  EXPECT_EQ(info.total, 3);
  EXPECT_EQ(info.done, 2);
  EXPECT_EQ(info.failed, 1);
  EXPECT_EQ(info.pending(), 0);
}

TEST_F(BatchesTest, AnEmptyBatchFiresWhenClosedAndAClosedOneRefusesTasks) {
  const std::string batch = shared.open_batch(
      {.batch_id = "b1", .on_complete = TaskSpec{.task_type = "complete", .payload = "{}"}});
  EXPECT_EQ(batch, "b1");
  EXPECT_THROW(shared.open_batch({.batch_id = "b1"}), ConfigError);
  EXPECT_TRUE(shared.close_batch(batch));
  EXPECT_EQ(xlen(stream), 1) << "its on_complete, at once";
  EXPECT_EQ(inspector.batch(stream, batch)->state, "fired");
  EXPECT_THROW(shared.enqueue("late", "{}", {.batch = batch}), BatchClosedError);
  EXPECT_THROW(shared.enqueue("nowhere", "{}", {.batch = "no-such-batch"}), BatchClosedError);
  std::vector<TaskSpec> mixed{{.task_type = "fine", .payload = "{}"},
                              {.task_type = "late", .payload = "{}", .options = {.batch = batch}}};
  EXPECT_THROW(shared.enqueue_batch(mixed), BatchClosedError);
  EXPECT_EQ(xlen(stream), 1) << "nothing of a refused call is written";
  EXPECT_THROW(shared.close_batch("no-such-batch"), BatchClosedError);
  EXPECT_FALSE(inspector.batch(stream, "no-such-batch"));
  EXPECT_THROW(shared.open_batch(
                   {.on_complete = TaskSpec{.task_type = "c", .payload = "{}", .options = {.delay = 1s}}}),
               ConfigError);
  Producer trimming(
      {.connection = {.url = server.url()}, .stream = stream, .overflow = Overflow::trim_oldest});
  EXPECT_THROW(trimming.enqueue("t", "{}", {.batch = "b2"}), ConfigError);
}

// open_batch and close_batch without blocking: the futures hold what the blocking calls return
// or throw; the callback forms get the same on the completion thread; a bad callback's
// ConfigError reaches the future, not the caller.
TEST_F(BatchesTest, ABatchOpenedAndClosedWithoutBlockingAnswersAsTheBlockingCalls) {
  std::future<std::string> opened = shared.open_batch_async(
      {.batch_id = "async-b", .on_complete = TaskSpec{.task_type = "complete", .payload = "{}"}});
  const std::string batch = opened.get();
  EXPECT_EQ(batch, "async-b");
  EXPECT_THROW(shared.open_batch_async({.batch_id = batch}).get(), ConfigError);
  std::future<std::string> bad = shared.open_batch_async(
      {.on_complete = TaskSpec{.task_type = "c", .payload = "{}", .options = {.delay = 1s}}});
  EXPECT_THROW(bad.get(), ConfigError);
  shared.enqueue("member", "{}", {.batch = batch});
  std::promise<bool> closed;
  shared.close_batch_async(batch, [&](std::exception_ptr e, bool now) {
    if (e) return closed.set_exception(e);
    closed.set_value(now);
  });
  EXPECT_TRUE(closed.get_future().get());
  EXPECT_FALSE(shared.close_batch_async(batch).get());
  EXPECT_THROW(shared.close_batch_async("no-such-batch").get(), BatchClosedError);
  EXPECT_THROW(shared.close_batch_async(batch, nullptr), ConfigError);
  EXPECT_EQ(xlen(stream), 1) << "the member; its on_complete once it ran";
  std::atomic<int> completes{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("member", [](const Task&) {});
    c.on("complete", [&](const Task&) { completes.fetch_add(1); });
  });
  ASSERT_TRUE(wait_until([&] { return completes.load() == 1; }, 10s));
  EXPECT_EQ(inspector.batch(stream, batch)->state, "fired");
}

TEST_F(BatchesTest, ANestedBatchEndsAsOneMemberOfItsParentWhenItFires) {
  const std::string outer =
      shared.open_batch({.on_complete = TaskSpec{.task_type = "outer_done", .payload = "{}"}});
  const std::string inner = shared.open_batch(
      {.on_complete = TaskSpec{.task_type = "inner_done", .payload = "{}"}, .parent_batch = outer});
  shared.enqueue("member", "{}", {.batch = outer});
  for (int i = 0; i < 3; ++i) shared.enqueue("member", "{}", {.batch = inner});
  std::mutex mutex;
  std::vector<std::string> order;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("member", [](const Task&) {});
    c.on("inner_done", [&](const Task&) {
      std::lock_guard lock(mutex);
      order.push_back("inner");
    });
    c.on("outer_done", [&](const Task&) {
      std::lock_guard lock(mutex);
      order.push_back("outer");
    });
  });
  shared.close_batch(outer);
  ASSERT_TRUE(wait_until([&] { return inspector.batch(stream, inner)->done == 3; }, 10s));
  EXPECT_EQ(inspector.batch(stream, outer)->state, "closed") << "its nested batch is still open";
  shared.close_batch(inner);
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard lock(mutex);
        return order.size() == 2;
      },
      10s));
  {
    // Both fired by the inner's close, in one script: the inner's callback enqueued first (they
    // may then run in either order, on two handler threads).
    std::lock_guard lock(mutex);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, (std::vector<std::string>{"inner", "outer"}));
  }
  const BatchInfo o = *inspector.batch(stream, outer);
  EXPECT_EQ(o.state, "fired");
  EXPECT_EQ(o.total, 2);  // one task and the nested batch
  EXPECT_EQ(o.done, 2);
  EXPECT_EQ(inspector.batch(stream, inner)->parent_batch, outer);
  EXPECT_THROW(shared.open_batch({.parent_batch = outer}), BatchClosedError);
}

}  // namespace
}  // namespace streamq::test
