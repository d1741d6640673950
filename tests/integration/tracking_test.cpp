// SPDX-License-Identifier: MIT
// Tracked tasks (EnqueueOptions::retention): the state record follows every change of a task
// (written by the script that makes the change), the events stream says each, results and
// progress reach the record, retention expires it, and untracked tasks cost nothing of this.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "gate.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;
using State = TaskRecord::State;

class TrackingTest : public ConsumerTest {
 protected:
  Inspector inspector{InspectorOptions{.connection = {.url = server.url()}}};

  std::optional<TaskRecord> record(const std::string& id) { return inspector.record(stream, id); }
  State state_of(const std::string& id) {
    const auto r = record(id);
    return r ? r->state : static_cast<State>(-1);
  }
  /// The events of the queue so far: (event, task id).
  std::vector<std::pair<std::string, std::string>> events() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const QueueEvent& e : inspector.events(stream, "", 10000).events)
      out.emplace_back(e.event, e.task_id);
    return out;
  }
  std::vector<std::string> events_of(const std::string& id) {
    std::vector<std::string> out;
    for (const auto& [event, task] : events()) {
      if (task == id) out.push_back(event);
    }
    return out;
  }
};

TEST_F(TrackingTest, ARecordFollowsATaskFromEnqueueThroughProgressToItsResult) {
  const std::string id = producer().enqueue("work", R"({"n":7})", {.retention = Retention{.done = 1min}});
  auto r = record(id);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, State::queued);
  EXPECT_EQ(r->task_type, "work");
  EXPECT_EQ(r->attempts, 0);
  EXPECT_TRUE(r->enqueued_at);
  EXPECT_FALSE(r->started_at);
  Gate gate;
  std::atomic<bool> tracked{false}, reported{false};
  auto o = options();
  o.consumer_name = "w1";
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      tracked = t.tracked();
      reported = t.set_progress(50) && t.write_partial_result("half");
      gate.pass(t.entry_id());
      t.set_result(R"({"sum":14})");
    });
  });
  const auto release = gate.opens_on_exit();
  ASSERT_FALSE(gate.arrived().empty());
  EXPECT_TRUE(tracked);
  EXPECT_TRUE(reported);
  // The start and the reports are written by the completer, not on the handler's path: soon,
  // while the handler is still held at the gate.
  ASSERT_TRUE(wait_until([&] {
    r = record(id);
    return r && r->progress == "50" && r->result == "half";
  }));
  EXPECT_EQ(r->state, State::running);
  EXPECT_EQ(r->attempts, 1);
  EXPECT_EQ(r->worker, "w1");
  EXPECT_TRUE(r->started_at);
  EXPECT_EQ(r->progress, "50");
  EXPECT_EQ(r->result, "half");  // written while it runs
  gate.open();
  ASSERT_TRUE(wait_until([&] { return state_of(id) == State::done; }));
  rc.stop();
  r = record(id);
  EXPECT_EQ(r->result, R"({"sum":14})");
  EXPECT_EQ(r->result_json()["sum"], 14);
  EXPECT_TRUE(r->finished_at);
  EXPECT_GE(*r->finished_at, *r->started_at);
  // What one record costs the server (printed for the figure in docs/results-and-waiting.md).
  const detail::Reply usage = client.cmd({"MEMORY", "USAGE", stream + ":task:" + id});
  if (!usage.view().is_error()) {
    std::printf("[ memory   ] a done record (a %zu-byte result, progress, every field): %lld bytes\n",
                r->result->size(), static_cast<long long>(usage.view().integer()));
  }
  const std::int64_t ttl = client.integer({"PTTL", stream + ":task:" + id});
  EXPECT_GT(ttl, 50000);
  EXPECT_LE(ttl, 60000);
  EXPECT_EQ(events_of(id), (std::vector<std::string>{"enqueued", "started", "progress", "done"}));
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
}

TEST_F(TrackingTest, RetriesAndADeadLetterAreRecordedAndTheRecordLivesAsLongAsTheDeadLetter) {
  const std::string id =
      producer().enqueue("flaky", "{}", {.max_retries = 1, .retention = Retention{.done = 1min}});
  std::atomic<int> runs{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task&) {
      ++runs;
      throw std::runtime_error("attempt " + std::to_string(runs.load()));
    });
  });
  ASSERT_TRUE(wait_until([&] { return state_of(id) == State::dead; }));
  rc.stop();
  auto r = record(id);
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(r->error, "attempt 2");
  EXPECT_EQ(r->reason, "retries_exhausted");
  EXPECT_EQ(client.integer({"PTTL", stream + ":task:" + id}), -1);  // as long as its dead letter
  EXPECT_EQ(events_of(id), (std::vector<std::string>{"enqueued", "started", "retry", "started", "dead"}));
  // A replay starts it again; deleting its dead letter deletes the record.
  ASSERT_EQ(inspector.replay(stream).done, 1);
  EXPECT_EQ(state_of(id), State::queued);
  ASSERT_EQ(inspector.cancel(stream, id), CancelOutcome::cancelled);
  EXPECT_EQ(state_of(id), State::cancelled);  // kept as a done one is (Retention::done)
  EXPECT_GT(client.integer({"PTTL", stream + ":task:" + id}), 0);
  const std::string other = producer().enqueue("flaky", "{}", {.max_retries = 0, .retention = Retention{}});
  RunningConsumer again(
      options(), [&](Consumer& c) { c.on("flaky", [&](const Task&) { throw PermanentError("no"); }); });
  ASSERT_TRUE(wait_until([&] { return state_of(other) == State::dead; }));
  again.stop();
  EXPECT_EQ(record(other)->reason, "permanent");
  EXPECT_EQ(inspector.purge_dead(stream), 1);
  EXPECT_FALSE(record(other));
}

TEST_F(TrackingTest, ADelayedTaskIsDelayedThenQueuedAndARetentionOfZeroKeepsNothing) {
  const std::string id =
      producer().enqueue("work", "{}", {.delay = 300ms, .retention = Retention{.done = 0ms}});
  EXPECT_EQ(state_of(id), State::delayed);
  ASSERT_TRUE(record(id)->due_at);
  EXPECT_GT(*record(id)->due_at, *record(id)->enqueued_at);
  std::atomic<int> runs{0};
  auto o = options();
  o.forward_interval = 20ms;
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++runs; }); });
  ASSERT_TRUE(wait_until([&] { return runs == 1 && pending() == 0; }));
  ASSERT_TRUE(wait_until([&] { return !record(id); }));  // done: gone at once
  rc.stop();
  EXPECT_EQ(events_of(id), (std::vector<std::string>{"enqueued", "started", "done"}));
}

TEST_F(TrackingTest, AResultIsTheSucceedingAttemptsAndAKeyOfAnotherTypeIsLeftAlone) {
  // A partial result of a failed attempt is not the task's result.
  const std::string id = producer().enqueue("flaky", "{}", {.retention = Retention{.done = 1min}});
  // A key of another type under a second task's record name: tracking leaves it, nothing else
  // of the task is disturbed (its retry is written with the original's ack, once).
  const std::string other_id = "taken-name";
  client.cmd({"SET", stream + ":task:" + other_id, "someone else's"}).view().check();
  producer().enqueue("flaky", "{}", {.task_id = other_id, .retention = Retention{.done = 1min}});
  std::atomic<int> runs{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      ++runs;
      if (t.retry_count() == 0) {
        t.write_partial_result("half");
        throw std::runtime_error("first attempt fails");
      }
    });
  });
  ASSERT_TRUE(wait_until([&] { return state_of(id) == State::done && runs == 4 && pending() == 0; }));
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0; }));
  rc.stop();
  EXPECT_EQ(runs, 4);  // each task twice: no copy written twice
  EXPECT_FALSE(record(id)->result);
  EXPECT_EQ(record(id)->attempts, 2);
  EXPECT_EQ(client.cmd({"GET", stream + ":task:" + other_id}).view().str(), "someone else's");
  EXPECT_EQ(xlen(dlq), 0);
}

// A stale holder (its entry was reclaimed and started again elsewhere while its handler ran on)
// must not write its progress or partial result into the newer attempt's record. Its reports are
// held and written by the completer, which finds the record another worker's: refused, and the
// reports that follow are dropped (the calls return false once the refusal is known).
TEST_F(TrackingTest, AStaleHolderCannotReportIntoANewerAttemptsRecord) {
  const std::string id = producer().enqueue("long", "{}", {.retention = Retention{.done = 1min}});
  const std::string key = stream + ":task:" + id;
  std::atomic<bool> started{false}, newer{false}, refused{false};
  std::atomic<int> own = -1;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      own = t.set_progress(0.25) ? 1 : 0;  // its own attempt: held, then written
      started = true;
      while (!newer) std::this_thread::sleep_for(5ms);
      // Every call is held at first; the refusal of the write is what ends them.
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!refused && std::chrono::steady_clock::now() < until) {
        refused = !t.set_progress(0.75) || !t.write_partial_result("stale");
        std::this_thread::sleep_for(20ms);
      }
    });
  });
  ASSERT_TRUE(wait_until([&] {
    return started.load() && client.cmd({"HGET", key, "progress"}).view().is_string();
  }));
  EXPECT_EQ(std::string(client.cmd({"HGET", key, "progress"}).view().str()), "0.25");
  // Another worker took the entry over and started it: attempt 2, its worker, its progress.
  client.cmd({"HSET", key, "attempts", "2", "worker", "new-holder", "progress", "0.1"});
  newer = true;
  ASSERT_TRUE(wait_until([&] { return refused.load(); }, 15s))
      << "the stale holder's reports were never refused";
  rc.stop();
  EXPECT_EQ(own.load(), 1);
  EXPECT_EQ(std::string(client.cmd({"HGET", key, "progress"}).view().str()), "0.1");
}

TEST_F(TrackingTest, UntrackedTasksHaveNoRecordAndNoEvents) {
  const std::string id = producer().enqueue("work", "{}");
  std::atomic<bool> tracked{true};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      tracked = t.tracked();
      t.set_result("ignored");
      EXPECT_FALSE(t.set_progress(1));
    });
  });
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1; }));
  rc.stop();
  EXPECT_FALSE(tracked);
  EXPECT_FALSE(record(id));
  EXPECT_EQ(client.integer({"EXISTS", stream + ":events"}), 0);
  // The entry holds the seed's six fields, and a tracked one one more.
  const std::string tracked_id = producer().enqueue("work", "{}", {.retention = Retention{}});
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].second.size(), 7u);
  EXPECT_EQ(Client::get(entries[0].second, "retention"), "0 -1");
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), tracked_id);
}

}  // namespace
}  // namespace streamq::test
