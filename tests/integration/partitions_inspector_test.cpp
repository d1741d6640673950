// SPDX-License-Identifier: MIT
// A partitioned queue is one queue to the Inspector: found once with its stats summed, lists
// paged across the partitions without gaps or repeats, and actions that reach every partition,
// an entry id that two partitions share refused until its partition is named.
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "inspector_fixture.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(InspectorPartitionsTest, DiscoveryAndStatsSeeOneQueue) {
  Producer p = partitioned();
  for (int i = 0; i < 9; ++i) p.enqueue("t", nlohmann::json{{"i", i}});
  p.enqueue("t", R"({})", {.priority = Priority::high});
  p.enqueue("t", R"({})", {.delay = 1h});
  p.enqueue("t", R"({})", {.delay = 1h});
  add_dead_to(part(0), "5-1", "dead-a");
  add_dead_to(part(2), "5-1", "dead-b");
  add_dead_to(part(2), "6-1", "dead-c");

  std::map<std::string, QueueInfo> found;
  for (QueueInfo& q : inspector.queues()) found[q.name] = std::move(q);
  ASSERT_EQ(found.size(), 1u) << "the partitions are one queue, not " << found.size();
  ASSERT_TRUE(found.count(base)) << found.begin()->first;
  const QueueInfo& q = found[base];
  EXPECT_EQ(q.partitions, (std::vector<std::string>{part(0), part(1), part(2)}));
  EXPECT_EQ(q.length, 10);
  EXPECT_EQ(q.delayed_count, 2);
  EXPECT_EQ(q.dlq_length, 3);
  EXPECT_EQ(q.levels, (std::vector<Priority>{Priority::high, Priority::normal}));
  EXPECT_TRUE(q.dlq.empty());

  // The name as the producer was given it and the base name are the same queue.
  for (const std::string& name : {stream, base}) {
    const QueueStats st = inspector.stats(name);
    EXPECT_EQ(st.partitions, kParts) << name;
    EXPECT_EQ(st.length, 10) << name;
    EXPECT_EQ(st.delayed, 2) << name;
    EXPECT_EQ(st.dlq_length, 3) << name;
  }
  // One partition by its own name.
  EXPECT_EQ(inspector.stats(part(2)).dlq_length, 2);
  EXPECT_EQ(inspector.stats(part(2)).partitions, 1);

  // The queue of one stream the partitions replaced (a partition count raised from 1) is part of it.
  Producer(ProducerOptions{.connection = {.url = server.url()}, .stream = stream}).enqueue("t", R"({})");
  found.clear();
  for (QueueInfo& i : inspector.queues()) found[i.name] = std::move(i);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_TRUE(found.count(stream));
  EXPECT_EQ(found[stream].partitions.size(), 4u);
  EXPECT_EQ(found[stream].partitions.back(), stream);
  EXPECT_EQ(found[stream].length, 11);
  EXPECT_EQ(inspector.stats(stream).length, 11);
  EXPECT_EQ(inspector.stats(stream).partitions, 4);

  // Queues that only look like partitions (no partition 0) stay queues of their own.
  for (const char* name : {"{tenant:1}", "{tenant:42}"}) {
    client.cmd({"XADD", name, "*", "task_id", "x", "task_type", "t", "payload", "{}"});
  }
  found.clear();
  for (QueueInfo& i : inspector.queues()) found[i.name] = std::move(i);
  EXPECT_EQ(found.size(), 3u);
  EXPECT_TRUE(found.count("{tenant:1}") && found["{tenant:1}"].partitions.empty());
  EXPECT_TRUE(found.count("{tenant:42}"));
  EXPECT_EQ(inspector.stats("tenant").exists, false);
}

TEST_F(InspectorPartitionsTest, ListsPageAcrossPartitionsWithoutGapsOrRepeats) {
  Producer p = partitioned();
  std::set<std::string> enqueued;
  for (int i = 0; i < 20; ++i) enqueued.insert(p.enqueue("t", nlohmann::json{{"i", i}}));
  for (int i = 0; i < 4; ++i) p.enqueue("t", R"({})", {.delay = 1h});
  for (const std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{100}}) {
    std::size_t pages = 0;
    const std::vector<TaskInfo> got = all(TaskState::queued, count, &pages);
    std::set<std::string> ids;
    std::map<std::string, int> per_partition;
    for (const TaskInfo& t : got) {
      ids.insert(std::string(t.task_id()));
      ++per_partition[t.partition];
      EXPECT_EQ(t.key, t.partition) << "a queued task is in its partition's stream";
    }
    EXPECT_EQ(got.size(), 20u) << "count " << count;
    EXPECT_EQ(ids, enqueued) << "count " << count;
    EXPECT_EQ(per_partition.size(), 3u);
    EXPECT_GE(pages, (20 + count - 1) / count);
  }
  const std::vector<TaskInfo> delayed = all(TaskState::delayed, 3);
  ASSERT_EQ(delayed.size(), 4u);
  for (const TaskInfo& t : delayed) EXPECT_EQ(t.key, t.partition + ":delayed");
  EXPECT_THROW(inspector.tasks(stream, {.state = TaskState::queued, .cursor = "x/q:n:(1-1"}), ConfigError);
  EXPECT_THROW(inspector.tasks(stream, {.state = TaskState::queued, .cursor = "q:n:(1-1"}), ConfigError);
  EXPECT_THROW(inspector.tasks(stream, {.state = TaskState::queued, .cursor = "3/q:n:(1-1"}), ConfigError)
      << "there are partitions 0 to 2";
}

TEST_F(InspectorPartitionsTest, ActionsReachEveryPartitionAndSharedIdsNeedTheirPartition) {
  Producer p = partitioned();
  const std::string later = p.enqueue("t", R"({})", {.delay = 1h});
  for (int i = 0; i < 6; ++i) p.enqueue("t", R"({})");
  add_dead_to(part(0), "5-1", "dead-a");
  add_dead_to(part(2), "5-1", "dead-b");
  add_dead_to(part(1), "6-1", "dead-c");
  add_dead_to(part(1), "7-1", "dead-d");
  // One task id, two streams, the same entry id.
  const std::string shared = "99999999999999-0";
  for (int i : {0, 1})
    client.cmd(
        {"XADD", part(i), shared, "task_id", "twin-" + std::to_string(i), "task_type", "t", "payload", "{}"});

  // Reading: the first partition that has it; exactly the one named.
  EXPECT_EQ(inspector.task(stream, "5-1")->partition, part(0));
  EXPECT_EQ(inspector.task(stream, part(2) + "/5-1")->task_id(), "dead-b");
  EXPECT_EQ(inspector.task(stream, "dead-c")->partition, part(1)) << "by task id";
  EXPECT_FALSE(inspector.task(stream, part(1) + "/5-1").has_value());

  // Acting: an id two partitions have is refused until its partition is named.
  EXPECT_THROW(inspector.cancel(stream, shared), ConfigError);
  EXPECT_EQ(inspector.cancel(stream, part(1) + "/" + shared), CancelOutcome::cancelled);
  EXPECT_EQ(inspector.cancel(stream, shared), CancelOutcome::cancelled) << "now in one partition only";
  EXPECT_EQ(inspector.cancel(stream, "twin-0"), CancelOutcome::missing);
  EXPECT_THROW(inspector.replay(stream, {.filter = {.ids = {"5-1"}}}), ConfigError);
  EXPECT_EQ(xlen(part(2) + ":dlq"), 1) << "a refused call changes nothing";
  ActionResult r = inspector.replay(stream, {.filter = {.ids = {part(2) + "/5-1", "6-1", "8-1"}}});
  EXPECT_EQ(r.done, 2);
  EXPECT_EQ(r.skipped, 1) << "8-1 is in no partition";
  EXPECT_EQ(xlen(part(2) + ":dlq"), 0);
  EXPECT_EQ(Client::get(client.xrange(part(2)).back().second, "task_id"), "dead-b")
      << "back to its own partition";
  EXPECT_EQ(Client::get(client.xrange(part(1)).back().second, "task_id"), "dead-c");

  // The whole dead-letter stream of every partition, with progress over all of them.
  std::vector<Progress> seen;
  r = inspector.replay(stream, {.progress = [&](const Progress& at) {
                         seen.push_back(at);
                         return true;
                       }});
  EXPECT_EQ(r.done, 2);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().done, 2);
  EXPECT_EQ(seen.back().scanned, 2);
  for (const Progress& at : seen) EXPECT_EQ(at.total, 2);
  add_dead_to(part(0), "9-1", "dead-e");
  add_dead_to(part(1), "9-1", "dead-f");
  EXPECT_EQ(inspector.delete_dead(stream, {.ids = {part(1) + "/9-1"}}).done, 1);
  EXPECT_EQ(inspector.purge_dead(stream), 1);
  EXPECT_EQ(inspector.stats(stream).dlq_length, 0);

  // A delayed task of any partition runs now in its own.
  const std::string its_partition = inspector.task(stream, later)->partition;
  EXPECT_EQ(inspector.task(stream, later)->state, TaskState::delayed);
  const std::optional<std::string> moved = inspector.run_now(stream, later);
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(inspector.stats(stream).delayed, 0);
  const std::optional<TaskInfo> now = inspector.task(stream, later);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->state, TaskState::queued);
  EXPECT_EQ(now->partition, its_partition);

  // Pause: every partition's flag.
  inspector.pause(stream);
  EXPECT_TRUE(inspector.paused(stream));
  for (int i = 0; i < kParts; ++i) EXPECT_EQ(client.integer({"EXISTS", part(i) + ":paused"}), 1) << i;
  EXPECT_TRUE(inspector.queues().front().paused);
  client.cmd({"DEL", part(1) + ":paused"});
  EXPECT_FALSE(inspector.paused(stream)) << "paused means every partition is";
  inspector.resume(stream);
  for (int i = 0; i < kParts; ++i) EXPECT_EQ(client.integer({"EXISTS", part(i) + ":paused"}), 0) << i;
}

}  // namespace
}  // namespace streamq::test
