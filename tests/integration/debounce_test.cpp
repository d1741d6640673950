// SPDX-License-Identifier: MIT
// Debounced tasks (EnqueueOptions::debounce): a burst of enqueues under one key runs once, with
// the first payload (keep_first) or the last one a window after the last call (replace_latest);
// concurrent producers collapse into one task; a call after the task left the delayed set starts
// a new cycle; the key picks the partition; a delay adds to the window; the state survives a
// restart; and what cannot be debounced is refused before anything is sent.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <latch>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis/cluster.hpp"
#include "running_consumer.hpp"
#include "scheduling_fixture.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class DebounceTest : public SchedulingTest {
 protected:
  static EnqueueOptions debounced(std::string key, std::chrono::milliseconds window,
                                  DebounceMode mode = DebounceMode::keep_first) {
    return EnqueueOptions{.debounce = Debounce{.key = std::move(key), .window = window, .mode = mode}};
  }
  std::string state_key(const std::string& key) const { return stream + ":debounce:" + key; }
  /// The fields of the delayed set's only member (a test failure when it holds another count).
  std::map<std::string, std::string> waiting() {
    const detail::Reply r = client.cmd({"ZRANGE", delayed, "0", "-1"});
    const auto v = r.view().check();
    EXPECT_EQ(v.size(), 1u);
    if (v.size() != 1) return {};
    return member_fields(std::string(v[0].str()));
  }
  /// A consumer that records each run of type "t": its payload and when it started (ms).
  struct Runs {
    std::mutex m;
    std::vector<std::string> payloads;
    std::vector<std::string> ids;
    std::vector<std::int64_t> started_ms;
    std::size_t size() {
      std::lock_guard lock(m);
      return payloads.size();
    }
  };
  RunningConsumer run(Runs& runs, ConsumerOptions o) {
    o.forward_interval = 20ms;
    return RunningConsumer(std::move(o), [&runs](Consumer& c) {
      c.on("t", [&runs](const Task& t) {
        std::lock_guard lock(runs.m);
        runs.payloads.push_back(t.payload());
        runs.ids.push_back(t.id());
        runs.started_ms.push_back(now_ms());
      });
      c.on("other", [](const Task&) {});
    });
  }
};

TEST_F(DebounceTest, KeepFirstDropsLaterEnqueuesAndRunsOnceWithTheFirstPayload) {
  Producer p = producer();
  const std::string first = p.enqueue("t", R"({"n":1})", debounced("report-7", 1500ms));
  const std::int64_t due = due_times().at(0);
  EXPECT_EQ(p.enqueue("t", R"({"n":2})", debounced("report-7", 1500ms)), first);
  EnqueueOptions with_id = debounced("report-7", 1500ms);
  with_id.task_id = "caller-given";
  EXPECT_EQ(p.enqueue("t", R"({"n":3})", with_id), first);  // absorbed: the waiting task's id
  EXPECT_EQ(zcard(), 1);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(due_times().at(0), due) << "keep_first does not move the start";
  auto fields = waiting();
  EXPECT_EQ(fields["task_id"], first);
  EXPECT_EQ(fields["payload"], R"({"n":1})");
  const detail::Reply id = client.cmd({"HGET", state_key("report-7"), "id"});
  EXPECT_EQ(id.view().check().str(), first);
  const std::int64_t ttl = client.integer({"PTTL", state_key("report-7")});
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 1500);
  // Another key is a burst of its own.
  const std::string other = p.enqueue("t", R"({"n":9})", debounced("report-8", 1500ms));
  EXPECT_NE(other, first);

  Runs runs;
  auto rc = run(runs, options());
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 2; }, 20s));
  EXPECT_EQ(zcard(), 0);
  std::lock_guard lock(runs.m);
  ASSERT_EQ(runs.payloads.size(), 2u);
  const auto at = std::find(runs.ids.begin(), runs.ids.end(), first) - runs.ids.begin();
  ASSERT_LT(at, 2);
  EXPECT_EQ(runs.payloads[static_cast<std::size_t>(at)], R"({"n":1})");
  EXPECT_GE(runs.started_ms[static_cast<std::size_t>(at)], due) << "ran before its window ended";
}

TEST_F(DebounceTest, ReplaceLatestRunsOnceWithTheLastPayloadAWindowAfterTheLastEnqueue) {
  Producer p = producer();
  const auto o = debounced("search-index", 1500ms, DebounceMode::replace_latest);
  const std::string first = p.enqueue("t", R"({"n":1})", o);
  const std::int64_t first_due = due_times().at(0);
  std::this_thread::sleep_for(100ms);  // (so the last call's window ends measurably later)
  EXPECT_EQ(p.enqueue("t", R"({"n":2})", o), first);
  const std::int64_t before = server_ms();
  EXPECT_EQ(p.enqueue("t", R"({"n":3})", o), first);
  const std::int64_t after = server_ms();
  ASSERT_EQ(zcard(), 1);
  const std::int64_t due = due_times().at(0);
  EXPECT_GE(due, before + 1500);
  EXPECT_LE(due, after + 1500);
  EXPECT_GT(due, first_due) << "replace_latest pushes the start back";
  auto fields = waiting();
  EXPECT_EQ(fields["task_id"], first);
  EXPECT_EQ(fields["task_type"], "t");
  EXPECT_EQ(fields["payload"], R"({"n":3})");

  Runs runs;
  auto rc = run(runs, options());
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1; }, 20s));
  // Nothing else comes: the cycle ran once.
  EXPECT_FALSE(wait_until([&] { return runs.size() > 1; }, 500ms));
  std::lock_guard lock(runs.m);
  ASSERT_EQ(runs.payloads.size(), 1u);
  EXPECT_EQ(runs.ids[0], first);
  EXPECT_EQ(runs.payloads[0], R"({"n":3})");
  EXPECT_GE(runs.started_ms[0], due) << "ran before a window after the last enqueue";
}

TEST_F(DebounceTest, ConcurrentReplacementsRunExactlyOneTaskWithALastPayloadAndLoseNothingElse) {
  constexpr int kThreads = 8;
  constexpr int kCalls = 25;
  std::vector<Producer> producers;
  producers.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    producers.push_back(producer());
    producers.back().enqueue("other", "{}");  // connected before the race
  }
  const auto o = debounced("burst", 5s, DebounceMode::replace_latest);
  std::latch start(kThreads);
  std::mutex m;
  std::set<std::string> returned;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Producer& p = producers[static_cast<std::size_t>(i)];
      start.arrive_and_wait();
      try {
        for (int n = 0; n < kCalls; ++n) {
          const nlohmann::json payload{{"thread", i}, {"n", n}};
          const std::string id = p.enqueue("t", payload, o);
          std::lock_guard lock(m);
          returned.insert(id);
        }
        p.enqueue("other", nlohmann::json{{"thread", i}});
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.emplace_back(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(errors.empty()) << errors.front();
  ASSERT_EQ(returned.size(), 1u) << "every call of the burst names the one task that will run";
  ASSERT_EQ(zcard(), 1);
  const auto fields = waiting();
  EXPECT_EQ(fields.at("task_id"), *returned.begin());
  const auto last = nlohmann::json::parse(fields.at("payload"));
  EXPECT_EQ(last["n"], kCalls - 1) << "the task's payload is not a thread's last: " << last.dump();
  EXPECT_EQ(xlen(stream), 2 * kThreads);  // the warm-ups and the other tasks, none lost

  Runs runs;
  auto rc = run(runs, options());
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 2 * kThreads + 1; }, 30s));
  EXPECT_FALSE(wait_until([&] { return runs.size() > 1; }, 300ms));
  std::lock_guard lock(runs.m);
  ASSERT_EQ(runs.payloads.size(), 1u);
  EXPECT_EQ(runs.ids[0], *returned.begin());
  EXPECT_EQ(nlohmann::json::parse(runs.payloads[0]), last);
}

TEST_F(DebounceTest, ACallAfterTheTaskLeftTheDelayedSetStartsANewCycle) {
  Producer p = producer();
  Inspector inspector(InspectorOptions{.connection = {.url = server.url()}});
  const auto o = debounced("sync", 60s, DebounceMode::replace_latest);
  const std::string first = p.enqueue("t", R"({"n":1})", o);
  // The window's end passes (here: an operator runs it now) while the state's key still lives:
  // the task is in its stream, so a replacement can no longer reach it.
  ASSERT_TRUE(inspector.run_now(stream, first).has_value());
  EXPECT_GT(client.integer({"PTTL", state_key("sync")}), 0);
  const std::string second = p.enqueue("t", R"({"n":2})", o);
  EXPECT_NE(second, first);
  EXPECT_EQ(zcard(), 1);
  EXPECT_EQ(waiting()["payload"], R"({"n":2})");
  EXPECT_EQ(p.enqueue("t", R"({"n":3})", o), second);
  // And after the window, with a worker: the first cycle's task ran, a new call is a new task.
  Runs runs;
  auto rc = run(runs, options());
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1; }, 20s));
  const auto short_window = debounced("short", 200ms);
  const std::string a = p.enqueue("t", R"({"n":4})", short_window);
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 2; }, 20s));
  const std::string b = p.enqueue("t", R"({"n":5})", short_window);
  EXPECT_NE(a, b);
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 3; }, 20s));
  std::lock_guard lock(runs.m);
  EXPECT_EQ(runs.ids, (std::vector<std::string>{first, a, b}));
  EXPECT_EQ(runs.payloads, (std::vector<std::string>{R"({"n":1})", R"({"n":4})", R"({"n":5})"}));
}

TEST_F(DebounceTest, AKeyExpiredBeforeTheTaskWasForwardedStartsANewCycleAndLosesNothing) {
  // No worker runs: the first cycle's task is still in the delayed set when its window ended.
  Producer p = producer();
  const std::string first = p.enqueue("t", R"({"n":1})", debounced("late", 200ms));
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", state_key("late")}) == 0; }, 5s));
  const std::string second = p.enqueue("t", R"({"n":2})", debounced("late", 200ms));
  EXPECT_NE(second, first);
  EXPECT_EQ(zcard(), 2);
  Runs runs;
  auto rc = run(runs, options());
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 2; }, 20s));
  std::lock_guard lock(runs.m);
  std::vector<std::string> payloads = runs.payloads;
  std::sort(payloads.begin(), payloads.end());
  EXPECT_EQ(payloads, (std::vector<std::string>{R"({"n":1})", R"({"n":2})"}));
}

TEST_F(DebounceTest, ADelayAddsToTheWindow) {
  Producer p = producer();
  EnqueueOptions o = debounced("delayed", 1000ms, DebounceMode::replace_latest);
  o.delay = 5s;
  const std::int64_t before = server_ms();
  const std::string id = p.enqueue("t", R"({"n":1})", o);
  const std::int64_t after = server_ms();
  EXPECT_GE(due_times().at(0), before + 6000);
  EXPECT_LE(due_times().at(0), after + 6000);
  const std::int64_t ttl = client.integer({"PTTL", state_key("delayed")});
  EXPECT_GT(ttl, 5000);
  EXPECT_LE(ttl, 6000);
  o.delay = 2s;  // a replacement's own delay counts from it
  const std::int64_t before2 = server_ms();
  EXPECT_EQ(p.enqueue("t", R"({"n":2})", o), id);
  const std::int64_t after2 = server_ms();
  EXPECT_GE(due_times().at(0), before2 + 3000);
  EXPECT_LE(due_times().at(0), after2 + 3000);
  EXPECT_EQ(waiting()["payload"], R"({"n":2})");
}

TEST_F(DebounceTest, ATrackedTaskKeepsItsRecordAndTheReturnedIdCanBeWaitedOn) {
  Producer p = producer();
  EnqueueOptions o = debounced("tracked", 500ms, DebounceMode::replace_latest);
  o.retention = Retention{.done = 60s};
  const std::string id = p.enqueue("t", R"({"n":1})", o);
  EXPECT_EQ(p.enqueue("t", R"({"n":2})", o), id);
  const std::int64_t due = due_times().at(0);
  const detail::Reply r = client.cmd({"HMGET", stream + ":task:" + id, "state", "due_at"});
  EXPECT_EQ(r.view().check()[0].str(), "delayed");
  EXPECT_EQ(std::stoll(std::string(r.view()[1].str())), due) << "the record's due_at follows the replacement";
  Runs runs;
  auto rc = run(runs, options());
  const TaskRecord record = p.wait(id, 20s);
  EXPECT_EQ(record.state, TaskRecord::State::done);
  std::lock_guard lock(runs.m);
  ASSERT_EQ(runs.payloads.size(), 1u);
  EXPECT_EQ(runs.payloads[0], R"({"n":2})");
}

TEST_F(DebounceTest, AFullQueueRefusesANewCycleButNotACallAbsorbedIntoTheWaitingTask) {
  Producer p({.connection = {.url = server.url()}, .stream = stream, .max_len = 1});
  const std::string id = p.enqueue("t", R"({"n":1})", debounced("k", 60s, DebounceMode::replace_latest));
  EXPECT_EQ(p.enqueue("t", R"({"n":2})", debounced("k", 60s, DebounceMode::replace_latest)), id);
  EXPECT_EQ(p.enqueue("t", R"({"n":3})", debounced("k", 60s)), id);
  EXPECT_THROW(p.enqueue("t", "{}", debounced("another", 60s)), QueueFullError);
  EXPECT_EQ(client.integer({"EXISTS", state_key("another")}), 0);
  EXPECT_EQ(zcard(), 1);
  EXPECT_EQ(waiting()["payload"], R"({"n":2})");
}

TEST_F(DebounceTest, AnotherTaskTypeUnderAWaitingKeyIsRefusedWithNothingWritten) {
  Producer p = producer();
  p.enqueue("t", R"({"n":1})", debounced("k", 60s, DebounceMode::replace_latest));
  try {
    p.enqueue("u", R"({"n":2})", debounced("k", 60s, DebounceMode::replace_latest));
    ADD_FAILURE() << "a call of another task type was absorbed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("debounce key"), std::string::npos) << e.what();
  }
  EXPECT_EQ(waiting()["payload"], R"({"n":1})");
  EXPECT_EQ(waiting()["task_type"], "t");
}

TEST_F(DebounceTest, TheDebounceKeyPicksThePartition) {
  constexpr int kPartitions = 4;
  const ProducerOptions po{.connection = {.url = server.url()}, .stream = stream, .partitions = kPartitions};
  Producer a(po);
  Producer b(po);  // each producer starts its turn at a random partition
  const auto o = debounced("invoice-12", 60s, DebounceMode::replace_latest);
  const std::string id = a.enqueue("t", R"({"n":1})", o);
  EXPECT_EQ(b.enqueue("t", R"({"n":2})", o), id);
  EXPECT_EQ(a.enqueue("t", R"({"n":3})", o), id);
  const int home = static_cast<int>(detail::crc16("invoice-12") % kPartitions);
  for (int i = 0; i < kPartitions; ++i) {
    const std::string part = detail::partition_stream(stream, kPartitions, i);
    EXPECT_EQ(client.integer({"ZCARD", part + ":delayed"}), i == home ? 1 : 0) << "partition " << i;
    EXPECT_EQ(client.integer({"EXISTS", part + ":debounce:invoice-12"}), i == home ? 1 : 0)
        << "partition " << i;
  }
}

TEST_F(DebounceTest, TheStateSurvivesARestartWithTheQueue) {
  RedisServer durable({.appendonly = true});
  Producer p({.connection = {.url = durable.url()}, .stream = stream});
  const auto o = debounced("restart", 60s, DebounceMode::replace_latest);
  const std::string id = p.enqueue("t", R"({"n":1})", o);
  durable.restart();
  // (The producer's connection was cut: its next call reconnects, maybe after one failure.)
  std::string again;
  ASSERT_TRUE(wait_until([&] {
    try {
      again = p.enqueue("t", R"({"n":2})", o);
      return true;
    } catch (const ConnectionError&) {
      return false;
    }
  }));
  EXPECT_EQ(again, id);
  Client after(durable.url());
  EXPECT_EQ(after.integer({"ZCARD", delayed}), 1);
}

TEST_F(DebounceTest, WhatCannotBeDebouncedIsRefusedBeforeAnythingIsSent) {
  Producer p = producer();
  Producer partitioned({.connection = {.url = server.url()}, .stream = stream, .partitions = 2});
  const auto refused = [](const std::function<void()>& call, const std::string& names) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected a ConfigError naming " << names;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  const auto base = [] { return debounced("k", 1s); };
  refused([&] { p.enqueue("t", "{}", debounced("", 1s)); }, "debounce.key");
  refused([&] { p.enqueue("t", "{}", debounced("k", 0ms)); }, "debounce.window");
  refused([&] { p.enqueue("t", "{}", debounced("k", -5ms)); }, "debounce.window");
  refused(
      [&] {
        EnqueueOptions o = base();
        o.run_at = std::chrono::system_clock::now() + 1s;
        p.enqueue("t", "{}", o);
      },
      "run_at");
  refused(
      [&] {
        EnqueueOptions o = base();
        o.unique_for = 1s;
        p.enqueue("t", "{}", o);
      },
      "unique_for");
  refused(
      [&] {
        EnqueueOptions o = base();
        o.partition_key = "x";
        p.enqueue("t", "{}", o);
      },
      "partition_key");
  refused(
      [&] {
        EnqueueOptions o = base();
        o.batch = "b";
        p.enqueue("t", "{}", o);
      },
      "batch");
  refused(
      [&] {
        EnqueueOptions o = base();
        o.tenant = "acme";
        partitioned.enqueue("t", "{}", o);
      },
      "debounced");
  refused([&] { p.enqueue_batch({TaskSpec{.task_type = "t", .payload = "{}", .options = base()}}); },
          "enqueue_batch");
  refused(
      [&] {
        FlowNode root{.task_type = "parent", .payload = "{}"};
        root.children.push_back(FlowNode{.task_type = "t", .payload = "{}", .options = base()});
        p.enqueue_flow(root);
      },
      "enqueue_flow");
  refused(
      [&] { p.open_batch({.on_complete = TaskSpec{.task_type = "t", .payload = "{}", .options = base()}}); },
      "open_batch");
  EXPECT_EQ(client.integer({"DBSIZE"}), 0) << "a refused call wrote something";
}

}  // namespace
}  // namespace streamq::test
