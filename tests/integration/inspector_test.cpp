// SPDX-License-Identifier: MIT
// The Inspector: discovery, listing by state with paging (also over 100,000 entries), one
// task, and every action (replay, delete, purge, run now, cancel, pause/resume), with workers
// running while it acts: nothing lost, nothing run twice because of the action.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "log_capture.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class InspectorTest : public ConsumerTest {
 protected:
  Inspector inspector{InspectorOptions{.connection = {.url = server.url()}}};

  Producer big_producer(const std::string& s) const {
    return Producer({.connection = {.url = server.url()}, .stream = s, .max_len = 1000000});
  }
  /// Dead letters as a worker writes them: the task's fields plus error, failed_at, original_id,
  /// consumer and reason.
  std::vector<std::string> add_dead(int n, const std::string& type = "t",
                                    const std::string& reason = "max_retries") {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) {
      const std::string task_id = type + "-" + std::to_string(i);
      const detail::Reply r = client.cmd({"XADD",
                                          dlq,
                                          "*",
                                          "task_id",
                                          task_id,
                                          "task_type",
                                          type,
                                          "payload",
                                          "{\"i\":" + std::to_string(i) + "}",
                                          "created_at",
                                          "2026-12-01T00:00:00.000000",
                                          "max_retries",
                                          "3",
                                          "retry_count",
                                          "3",
                                          "error",
                                          "boom " + std::to_string(i),
                                          "failed_at",
                                          "2026-12-01T00:00:01.000000",
                                          "original_id",
                                          "1-1",
                                          "consumer",
                                          "w1",
                                          "reason",
                                          reason});
      ids.emplace_back(r.view().check().str());
    }
    return ids;
  }
  /// Every task of `state`, page by page of `count`.
  std::vector<TaskInfo> all(TaskState state, std::size_t count, std::size_t* pages = nullptr) {
    std::vector<TaskInfo> out;
    TaskQuery q{.state = state, .count = count};
    std::size_t n = 0;
    for (;;) {
      TaskPage page = inspector.tasks(stream, q);
      EXPECT_LE(page.tasks.size(), count);
      ++n;
      for (TaskInfo& t : page.tasks) out.push_back(std::move(t));
      if (page.next_cursor.empty()) break;
      q.cursor = page.next_cursor;
    }
    if (pages) *pages = n;
    return out;
  }
};

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

TEST_F(InspectorTest, ReplayWhileWorkersRunRunsEachTaskOnceWithItsHistory) {
  constexpr int kN = 2000;
  add_dead(kN);
  std::mutex m;
  std::map<std::string, int> runs;
  std::map<std::string, std::string> seen_fields;
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on("t", [&](const Task& task) {
      std::lock_guard lock(m);
      ++runs[task.id()];
      if (task.id() == "t-7") {
        for (const auto& [k, v] : task.fields()) seen_fields[k] = v;
      }
    });
  });
  std::vector<Progress> reports;
  const ActionResult r = inspector.replay(stream, {.progress = [&](const Progress& p) {
                                            reports.push_back(p);
                                            return true;
                                          }});
  EXPECT_EQ(r.done, kN);
  EXPECT_EQ(r.skipped, 0);
  EXPECT_TRUE(r.finished);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().done, kN);
  EXPECT_EQ(reports.back().total, kN);
  EXPECT_EQ(xlen(dlq), 0);
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard lock(m);
        return runs.size() == static_cast<std::size_t>(kN);
      },
      30s));
  worker.stop();
  for (const auto& [id, n] : runs) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(seen_fields["retry_count"], "0") << "a fresh attempt count";
  EXPECT_EQ(seen_fields["replay_count"], "1");
  EXPECT_EQ(seen_fields["last_error"], "boom 7") << "the history is kept";
  EXPECT_FALSE(seen_fields["replayed_from"].empty());
  EXPECT_FALSE(seen_fields.count("reason")) << "the dead letter's own fields are not copied";
  EXPECT_EQ(seen_fields["max_retries"], "3");
}

TEST_F(InspectorTest, ReplayDoesNotReplayTasksThatFailAgainDuringIt) {
  add_dead(300, "always_fails");
  // A worker that dead-letters every replayed task at once: the replay must end anyway, with
  // each dead letter that was there at its start replayed once.
  std::atomic<int> runs{0};
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on("always_fails", [&](const Task&) {
      ++runs;
      throw PermanentError("still broken");
    });
  });
  const ActionResult r = inspector.replay(stream);
  EXPECT_EQ(r.done, 300);
  ASSERT_TRUE(wait_until([&] { return runs.load() == 300 && xlen(dlq) == 300; }, 30s));
  worker.stop();
  for (const auto& [id, f] : client.xrange(dlq)) EXPECT_EQ(Client::get(f, "replay_count"), "1") << id;
}

TEST_F(InspectorTest, ReplayAndDeleteByFilterAndByIds) {
  const auto a = add_dead(5, "a", "max_retries");
  const auto b = add_dead(4, "b", "permanent");
  client.cmd({"XADD", dlq, "*", "member", "\x01\x02", "reason", "malformed"});  // not a task

  ActionResult r = inspector.replay(stream, {.filter = {.task_type = "a"}});
  EXPECT_EQ(r.done, 5);
  EXPECT_EQ(xlen(stream), 5);
  r = inspector.replay(stream,
                       {.filter = {.ids = {b[0], b[1]}, .reason = "permanent"}, .priority = Priority::high});
  EXPECT_EQ(r.done, 2);
  EXPECT_EQ(xlen(stream + ":p:high"), 2) << "to the level asked for";
  r = inspector.replay(stream, {.filter = {.ids = {b[2]}, .reason = "max_retries"}});
  EXPECT_EQ(r.done, 0) << "the filter applies to named ids too";
  EXPECT_EQ(r.skipped, 1);
  r = inspector.replay(stream, {.filter = {.reason = "malformed"}});
  EXPECT_EQ(r.done, 0) << "an entry that is not a task is not replayed";
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(xlen(dlq), 3);

  r = inspector.delete_dead(stream, {.ids = {b[2], a[0]}});
  EXPECT_EQ(r.done, 1) << "a[0] was replayed already";
  EXPECT_EQ(r.skipped, 1);
  r = inspector.delete_dead(stream, {.task_type = "b"});
  EXPECT_EQ(r.done, 1);
  EXPECT_EQ(xlen(dlq), 1);
  add_dead(10);
  EXPECT_EQ(inspector.purge_dead(stream), 11);
  EXPECT_EQ(client.integer({"EXISTS", dlq}), 0);
  EXPECT_THROW(inspector.replay(stream, {.filter = {.ids = {"not-an-id"}}}), ConfigError);
}

TEST_F(InspectorTest, AnInterruptedReplayLeavesEveryTaskInExactlyOnePlace) {
  add_dead(1600);
  int batches = 0;
  const ActionResult r =
      inspector.replay(stream, {.progress = [&](const Progress&) { return ++batches < 2; }});
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.done, 1000) << "two batches of 500";
  EXPECT_EQ(xlen(stream) + xlen(dlq), 1600);
  std::set<std::string> ids;
  for (const std::string& key : {stream, dlq}) {
    for (const auto& [id, f] : client.xrange(key)) ids.insert(Client::get(f, "task_id"));
  }
  EXPECT_EQ(ids.size(), 1600u);
}

TEST_F(InspectorTest, RunNowAndCancelDelayedTasks) {
  Producer p = producer();
  p.enqueue("later", R"({"n":1})", {.task_id = "soon", .delay = 1h});
  p.enqueue("later", R"({"n":2})", {.task_id = "never", .delay = 1h});
  std::atomic<int> ran{0};
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on("later", [&](const Task& t) {
      EXPECT_EQ(t.id(), "soon");
      ++ran;
    });
  });
  const auto id = inspector.run_now(stream, "soon");
  ASSERT_TRUE(id);
  ASSERT_TRUE(wait_until([&] { return ran.load() == 1; }));
  EXPECT_FALSE(inspector.run_now(stream, "soon")) << "no longer delayed";
  EXPECT_EQ(inspector.cancel(stream, "never"), CancelOutcome::cancelled);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0);
  EXPECT_EQ(inspector.cancel(stream, "never"), CancelOutcome::missing);
  worker.stop();
  EXPECT_EQ(ran.load(), 1);
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

TEST_F(InspectorTest, CancellingADelayedUniqueTaskReleasesItsLock) {
  Producer p = producer();
  p.enqueue("t", R"({})", {.task_id = "u1", .delay = 1h, .unique_for = 1h, .unique_key = "report"});
  EXPECT_THROW(p.enqueue("t", R"({})", {.unique_for = 1h, .unique_key = "report"}), DuplicateTaskError);
  EXPECT_EQ(inspector.cancel(stream, "u1"), CancelOutcome::cancelled);
  EXPECT_NO_THROW(p.enqueue("t", R"({})", {.unique_for = 1h, .unique_key = "report"}));
}

TEST_F(InspectorTest, CancelRemovesAQueuedTaskButNeverOneAWorkerHolds) {
  Producer p = producer();
  p.enqueue("t", R"({})", {.task_id = "first"});
  p.enqueue("t", R"({})", {.task_id = "second", .unique_for = 1h, .unique_key = "k"});
  p.enqueue("t", R"({})", {.task_id = "third"});
  const std::string first = client.xrange(stream).front().first;
  const auto held = read_as("busy-worker", 1);
  ASSERT_EQ(held, std::vector<std::string>{first});
  EXPECT_EQ(inspector.cancel(stream, first), CancelOutcome::running);
  EXPECT_EQ(pending(), 1) << "a held task is left alone";
  EXPECT_EQ(inspector.cancel(stream, "second"), CancelOutcome::cancelled);
  EXPECT_EQ(client.integer({"EXISTS", stream + ":unique:k"}), 0) << "its uniqueness lock goes with it";
  const auto rest = client.xrange(stream);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(Client::get(rest[1].second, "task_id"), "third");
  EXPECT_EQ(inspector.cancel(stream, "second"), CancelOutcome::missing);
}

TEST_F(InspectorTest, APausedQueueIsNotReadUntilResumed) {
  ConsumerOptions o = options();
  o.pause_check_interval = 50ms;
  std::atomic<int> done{0};
  LogCapture log(LogLevel::info);
  // The consumer noticed the pause (it logs each change) and its last read returned: no client
  // is blocked in XREADGROUP any more, so nothing enqueued from now on can be delivered.
  const auto idle_paused = [&](std::size_t pauses) {
    const std::string info(client.cmd({"INFO", "clients"}).view().check().str());
    return log.count(LogLevel::info, "is paused") == pauses &&
           info.find("blocked_clients:0") != std::string::npos;
  };
  inspector.pause(stream);
  EXPECT_TRUE(inspector.paused(stream));
  RunningConsumer worker(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++done; }); });
  ASSERT_TRUE(wait_until([&] { return idle_paused(1); })) << "a consumer started on a paused queue";
  Producer p = producer();
  for (int i = 0; i < 20; ++i) p.enqueue("t", R"({})");
  // Many pause checks later, nothing was taken.
  EXPECT_FALSE(wait_until([&] { return done.load() > 0 || pending() > 0; }, 1500ms));
  inspector.resume(stream);
  ASSERT_TRUE(wait_until([&] { return done.load() == 20; }));
  // Paused while running: it stops within a check or two, and what it holds finishes.
  inspector.pause(stream);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 20; }));
  ASSERT_TRUE(wait_until([&] { return idle_paused(2); }));
  for (int i = 0; i < 10; ++i) p.enqueue("t", R"({})");
  EXPECT_FALSE(wait_until([&] { return done.load() > 20; }, 1000ms));
  EXPECT_EQ(xlen(stream), 10);
  inspector.resume(stream);
  ASSERT_TRUE(wait_until([&] { return done.load() == 30; }));
  EXPECT_FALSE(inspector.paused(stream));
}

TEST_F(InspectorTest, DoctorFlagsWhatWouldLoseTasks) {
  // The test server runs without AOF and with Redis' default policy.
  std::map<std::string, Finding> by_topic;
  for (Finding& f : inspector.doctor(stream)) by_topic[f.topic] = f;
  ASSERT_TRUE(by_topic.count("persistence"));
  EXPECT_EQ(by_topic["persistence"].severity, Finding::Severity::danger) << by_topic["persistence"].message;
  EXPECT_EQ(by_topic["maxmemory-policy"].severity, Finding::Severity::ok);
  EXPECT_EQ(by_topic["clock"].severity, Finding::Severity::ok) << by_topic["clock"].message;
  client.cmd({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"});
  client.cmd({"CONFIG", "SET", "appendonly", "yes"});
  by_topic.clear();
  for (Finding& f : inspector.doctor(stream)) by_topic[f.topic] = f;
  EXPECT_EQ(by_topic["maxmemory-policy"].severity, Finding::Severity::danger);
  EXPECT_NE(by_topic["maxmemory-policy"].message.find("allkeys-lru"), std::string::npos);
  EXPECT_NE(by_topic["persistence"].severity, Finding::Severity::danger) << by_topic["persistence"].message;
  if (client.redis_at_least(7, 0)) {
    // The default user may run everything.
    std::vector<Finding> acl;
    for (Finding& f : inspector.doctor(stream)) {
      if (f.topic == "acl") acl.push_back(f);
    }
    ASSERT_EQ(acl.size(), 4u);
    for (const Finding& f : acl) EXPECT_EQ(f.severity, Finding::Severity::ok) << f.message;
    client.cmd({"ACL", "SETUSER", "narrow", "on", ">pw", "~*", "+@read", "+acl|whoami", "+acl|dryrun",
                "+info", "+config|get", "+time", "+client|setname", "+client|id"});
    Inspector as_narrow(InspectorOptions{
        .connection = {.url = "redis://narrow:pw@127.0.0.1:" + std::to_string(server.port())}});
    acl.clear();
    for (Finding& f : as_narrow.doctor(stream)) {
      if (f.topic == "acl") acl.push_back(f);
    }
    ASSERT_EQ(acl.size(), 4u);
    EXPECT_NE(acl[0].message.find("XADD"), std::string::npos) << acl[0].message;
  }
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

// A partitioned queue is one queue to the Inspector: found once, stats summed, lists walking the
// partitions, actions acting on each, entry ids that two partitions share refused where they would
// act unless their partition is named.
class InspectorPartitionsTest : public InspectorTest {
 protected:
  static constexpr int kParts = 3;
  std::string base = detail::partition_base(stream);
  std::string part(int i) const { return detail::partition_stream(stream, kParts, i); }
  Producer partitioned() const {
    return Producer({.connection = {.url = server.url()}, .stream = stream, .partitions = kParts});
  }
  void add_dead_to(const std::string& partition, const std::string& id, const std::string& task_id) {
    client.cmd({"XADD", partition + ":dlq", id, "task_id", task_id, "task_type", "t", "payload", "{}",
                "retry_count", "3", "error", "boom", "reason", "max_retries"});
  }
};

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
    EXPECT_EQ(st.total_length, 10) << name;
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
  EXPECT_EQ(inspector.stats(stream).total_length, 11);
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

TEST_F(InspectorPartitionsTest, APausedPartitionedQueueIsNotReadUntilResumed) {
  ConsumerOptions o = options();
  o.partitions = kParts;
  o.concurrency = kParts;
  o.pause_check_interval = 50ms;
  Producer p = partitioned();
  for (int i = 0; i < 9; ++i) p.enqueue("t", R"({})");
  inspector.pause(stream);
  std::atomic<int> done{0};
  RunningConsumer worker(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++done; }); });
  EXPECT_FALSE(wait_until([&] { return done.load() > 0; }, 1000ms)) << "no partition is read while paused";
  inspector.resume(stream);
  ASSERT_TRUE(wait_until([&] { return done.load() == 9; }));
}

TEST_F(InspectorPartitionsTest, DoctorChecksTheFirstPartitionsKeys) {
  Producer p = partitioned();
  for (int i = 0; i < kParts; ++i) p.enqueue("t", R"({})");  // one in each partition, 0 included
  // Redis 6.2 has no ACL DRYRUN: its one acl finding says so.
  const std::string expected = client.redis_at_least(7, 0) ? part(0) : "needs Redis >= 7.0";
  int acl = 0;
  for (const Finding& f : inspector.doctor(stream)) {
    if (f.topic != "acl") continue;
    ++acl;
    EXPECT_NE(f.message.find(expected), std::string::npos) << f.message;
  }
  EXPECT_GE(acl, 1);
}

}  // namespace
}  // namespace streamq::test
