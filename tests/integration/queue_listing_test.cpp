// SPDX-License-Identifier: MIT
// Finding queues and their tasks with the Inspector: queues discovered by the shape of their
// keys (other streams skipped), tasks listed by state with their details, paged without gaps or
// repeats (over 100,000 entries one bounded page at a time, and while delayed members leave), one
// task found by entry id or task id, and the exposition of several queues.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "inspector_fixture.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(InspectorTest, DiscoversQueuesByShapeAndSkipsOtherStreams) {
  producer().enqueue("t", R"({})");
  Producer delayed_only({.connection = {.url = server.url()}, .stream = stream + "-later"});
  delayed_only.enqueue("t", R"({})", {.delay = 1h});
  Producer high({.connection = {.url = server.url()}, .stream = stream + "-high"});
  high.enqueue("t", R"({})", {.priority = Priority::high});
  client.cmd({"XADD", stream + "-dead:dlq", "*", "task_id", "a", "task_type", "t", "payload", "{}"});
  client.cmd({"XADD", "someone-elses-log", "*", "line", "hello"});  // not a task
  client.cmd({"XGROUP", "CREATE", stream + "-drained", "workers", "$", "MKSTREAM"});
  inspector.pause(stream);

  std::map<std::string, QueueInfo> found;
  for (QueueInfo& q : inspector.queues()) found[q.name] = std::move(q);
  ASSERT_TRUE(found.count(stream)) << "the queue itself";
  EXPECT_EQ(found[stream].length, 1);
  EXPECT_TRUE(found[stream].paused);
  EXPECT_EQ(found[stream].dlq, stream + ":dlq");
  ASSERT_TRUE(found.count(stream + "-later")) << "a queue with only delayed tasks (no stream yet)";
  EXPECT_EQ(found[stream + "-later"].delayed_count, 1);
  ASSERT_TRUE(found.count(stream + "-high")) << "a queue with only high-priority tasks";
  EXPECT_EQ(found[stream + "-high"].levels, std::vector<Priority>{Priority::high});
  ASSERT_TRUE(found.count(stream + "-dead")) << "a queue with only dead letters";
  EXPECT_EQ(found[stream + "-dead"].dlq_length, 1);
  EXPECT_TRUE(found.count(stream + "-drained")) << "an empty stream with a consumer group";
  EXPECT_FALSE(found.count("someone-elses-log"));
  EXPECT_FALSE(found.count(stream + ":dlq")) << "a dead-letter stream is part of its queue";
  EXPECT_FALSE(found.count(stream + "-high:p:high"));
  // A level's stream that a worker made (XGROUP CREATE ... MKSTREAM) is a level, empty or not.
  client.cmd({"XGROUP", "CREATE", stream + ":p:low", "workers", "$", "MKSTREAM"});
  for (QueueInfo& q : inspector.queues()) found[q.name] = std::move(q);
  EXPECT_EQ(found[stream].levels, (std::vector<Priority>{Priority::normal, Priority::low}));
}

TEST_F(InspectorTest, ListsEachStateWithItsDetailsAndPagesWithoutGapsOrRepeats) {
  Producer p = producer();
  for (int i = 0; i < 23; ++i) p.enqueue("t", nlohmann::json{{"i", i}});
  Producer(ProducerOptions{.connection = {.url = server.url()}, .stream = stream})
      .enqueue("urgent", R"({})", {.priority = Priority::high});
  const std::vector<std::string> held = read_as("dead-worker", 5);  // pending, never acked
  ASSERT_EQ(held.size(), 5u);
  for (int i = 0; i < 4; ++i)
    p.enqueue("later", R"({})", {.task_id = "later-" + std::to_string(i), .delay = 1h});
  add_dead(3);

  std::size_t pages = 0;
  const std::vector<TaskInfo> queued = all(TaskState::queued, 4, &pages);
  ASSERT_EQ(queued.size(), 19u) << "18 normal after the 5 read, and the high one";
  EXPECT_EQ(queued.front().level, Priority::high) << "most important level first";
  EXPECT_EQ(queued.front().task_type(), "urgent");
  std::set<std::string> ids;
  for (const TaskInfo& t : queued) {
    EXPECT_EQ(t.state, TaskState::queued);
    ids.insert(t.key + " " + t.id);  // ids of two streams can be equal
  }
  EXPECT_EQ(ids.size(), queued.size()) << "no entry on two pages";
  EXPECT_GE(pages, 5u);

  const std::vector<TaskInfo> pending = all(TaskState::pending, 2);
  ASSERT_EQ(pending.size(), 5u);
  for (std::size_t i = 0; i < pending.size(); ++i) {
    EXPECT_EQ(pending[i].id, held[i]);
    EXPECT_EQ(pending[i].consumer, "dead-worker");
    EXPECT_EQ(pending[i].deliveries, 1);
    EXPECT_EQ(pending[i].task_type(), "t") << "the body comes with it";
  }

  const std::int64_t now = inspector.server_time_ms();
  const std::vector<TaskInfo> delayed = all(TaskState::delayed, 3);
  ASSERT_EQ(delayed.size(), 4u);
  for (const TaskInfo& t : delayed) {
    EXPECT_EQ(t.task_type(), "later");
    EXPECT_EQ(t.id, t.task_id());
    EXPECT_GT(t.due_ms, now + 3500 * 1000);
  }

  const std::vector<TaskInfo> dead = all(TaskState::dead, 2);
  ASSERT_EQ(dead.size(), 3u);
  EXPECT_EQ(dead[0].field("reason"), "max_retries");
  EXPECT_EQ(dead[2].field("error"), "boom 2");

  EXPECT_THROW(inspector.tasks(stream, {.state = TaskState::dead, .cursor = "q:n:(1-1"}), ConfigError);
  EXPECT_THROW(inspector.tasks(stream, {.state = TaskState::queued, .count = 0}), ConfigError);
  EXPECT_THROW(inspector.tasks(stream, {.state = TaskState::delayed, .cursor = "d:x:1"}), ConfigError);
}

TEST_F(InspectorTest, PagesOverOneHundredThousandEntriesOneBoundedPageAtATime) {
  constexpr int kN = 100000;
  for (const std::string& s : {stream, dlq}) {
    Producer p = big_producer(s);
    std::vector<TaskSpec> batch;
    for (int i = 0; i < kN; ++i) {
      batch.push_back(TaskSpec{"t", R"({})", {.task_id = std::to_string(i)}});
      if (batch.size() == 5000) {
        p.enqueue_batch(batch);
        batch.clear();
      }
    }
  }
  for (const TaskState state : {TaskState::queued, TaskState::dead}) {
    TaskQuery q{.state = state, .count = 1000};
    std::int64_t seen = 0, expected_next = 0;
    std::size_t biggest = 0;
    for (;;) {
      const TaskPage page = inspector.tasks(stream, q);
      biggest = std::max(biggest, page.tasks.size());
      for (const TaskInfo& t : page.tasks) {
        ASSERT_EQ(t.task_id(), std::to_string(expected_next)) << "in order, none skipped or repeated";
        ++expected_next;
      }
      seen += static_cast<std::int64_t>(page.tasks.size());
      if (page.next_cursor.empty()) break;
      q.cursor = page.next_cursor;
    }
    EXPECT_EQ(seen, kN) << to_string(state);
    EXPECT_EQ(biggest, 1000u) << "never more than one page in hand";
  }
}

TEST_F(InspectorTest, DelayedPagesSkipNothingWhenMembersLeaveBetweenThem) {
  // Six tasks due in the same millisecond (one score, ordered by their bytes); the first page's
  // members leave before the next page is read, as due tasks do when a forwarder moves them.
  for (int i = 0; i < 6; ++i) {
    const nlohmann::json parts = {"sq1",
                                  "nonce" + std::to_string(i),
                                  stream,
                                  "task_id",
                                  "same-" + std::to_string(i),
                                  "task_type",
                                  "t",
                                  "payload",
                                  "{}"};
    const std::vector<std::uint8_t> bytes = nlohmann::json::to_msgpack(parts);
    client.cmd({"ZADD", stream + ":delayed", "4102444800000", std::string(bytes.begin(), bytes.end())});
  }
  TaskPage page = inspector.tasks(stream, {.state = TaskState::delayed, .count = 2});
  ASSERT_EQ(page.tasks.size(), 2u);
  std::set<std::string> seen;
  for (const TaskInfo& t : page.tasks) {
    seen.insert(t.id);
    EXPECT_EQ(inspector.cancel(stream, t.id), CancelOutcome::cancelled);
  }
  while (!page.next_cursor.empty()) {
    page = inspector.tasks(stream, {.state = TaskState::delayed, .cursor = page.next_cursor, .count = 2});
    for (const TaskInfo& t : page.tasks) EXPECT_TRUE(seen.insert(t.id).second) << t.id;
  }
  EXPECT_EQ(seen.size(), 6u) << "none skipped, none repeated";
}

TEST_F(InspectorTest, FindsOneTaskByEntryIdOrTaskId) {
  Producer p = producer();
  const std::string queued_id = p.enqueue("t", R"({"a":1})", {.task_id = "job-1"});
  p.enqueue("t", R"({})", {.task_id = "job-2", .delay = 1h});
  // Entry ids of different streams can be equal: this one is below any of the stream's.
  client.cmd(
      {"XADD", dlq, "5-5", "task_id", "old", "task_type", "t", "payload", "{}", "reason", "permanent"});
  add_dead(1);
  const auto held = read_as("w9", 1);

  auto t = inspector.task(stream, held[0]);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->state, TaskState::pending);
  EXPECT_EQ(t->consumer, "w9");
  EXPECT_EQ(t->task_id(), "job-1");
  t = inspector.task(stream, "job-2");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->state, TaskState::delayed);
  t = inspector.task(stream, "5-5");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->state, TaskState::dead);
  EXPECT_EQ(t->task_id(), "old");
  t = inspector.task(stream, "t-0");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->state, TaskState::dead);
  EXPECT_EQ(t->field("error"), "boom 0");
  EXPECT_FALSE(inspector.task(stream, "no-such-task"));
  EXPECT_FALSE(inspector.task(stream, "1-999"));
  EXPECT_NE(t->to_json().find("\"state\":\"dead\""), std::string::npos) << t->to_json();
  EXPECT_EQ(queued_id, "job-1");
}

TEST_F(InspectorTest, ExpositionOfSeveralQueuesNamesEachFamilyOnce) {
  producer().enqueue("t", R"({})");
  Producer(ProducerOptions{.connection = {.url = server.url()}, .stream = stream + "-2"})
      .enqueue("t", R"({})");
  std::vector<QueueStats> all_stats;
  for (const QueueInfo& q : inspector.queues()) all_stats.push_back(inspector.stats(q.name));
  ASSERT_EQ(all_stats.size(), 2u);
  const std::string text = to_prometheus(all_stats);
  std::map<std::string, int> help;
  std::size_t at = 0;
  while ((at = text.find("# HELP ", at)) != std::string::npos) {
    at += 7;
    ++help[text.substr(at, text.find(' ', at) - at)];
  }
  for (const auto& [name, n] : help) EXPECT_EQ(n, 1) << name;
  EXPECT_NE(text.find("streamq_stream_length{stream=\"" + stream + "\"} 1"), std::string::npos);
  EXPECT_NE(text.find("streamq_stream_length{stream=\"" + stream + "-2\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace streamq::test
