// SPDX-License-Identifier: MIT
// Cancelling a task wherever it is: a delayed one is removed (or run now instead) and its
// uniqueness lock released, a queued one removed but never one a worker holds; a running one is
// asked to stop and ends cancelled, not retried, even when its handler fails first or ignores
// the request (it is given up), and one waiting in a worker's prefetch never starts.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "control_fixture.hpp"
#include "inspector_fixture.hpp"
#include "log_capture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

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

TEST_F(ControlTest, ACancelReachesARunningTaskWhichEndsCancelled) {
  Producer p = producer();
  const std::string id =
      p.enqueue("t", "{}", {.max_retries = 3, .unique_for = 1h, .retention = Retention{.done = 1h}});
  std::atomic<bool> started{false};
  std::string why;
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("t", [&](const Task& task) {
      started = true;
      why = wait_for_stop(task);
      throw std::runtime_error("interrupted");  // a cancelled task is not retried whatever it does
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(why, "cancelled");
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(xlen(dlq), 0);
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
  EXPECT_EQ(client.integer({"EXISTS", stream + ":unique:" + id}), 0) << "its unique lock is released";
  EXPECT_EQ(client.cmd({"KEYS", stream + ":cancel:*"}).view().size(), 0U) << "the request goes with the task";
  const auto record = in.record(stream, id);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, TaskRecord::State::cancelled);
}

TEST_F(ControlTest, ACancelledTaskWhoseHandlerIgnoresItIsGivenUp) {
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}");
  std::atomic<bool> started{false}, let_return{false}, returned{false};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("t", [&](const Task&) {
      started = true;
      // Ignores the cancel: returns only once the test saw the task given up (or after 20 s).
      wait_until([&] { return let_return.load(); }, 20s);
      returned = true;
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s))
      << "the cancelled task's fate waited for its handler";
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(pending(), 0);
  let_return = true;
  ASSERT_TRUE(wait_until([&] { return returned.load(); }, 10s));
  std::this_thread::sleep_for(300ms);
  worker.stop();
  EXPECT_EQ(worker.consumer().metrics().done, 0U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 1U);
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ControlTest, ACancelThatComesBeforeAFailureIsNotLostToTheRetry) {
  // The handler fails before its holder's lease renewal (every 5 s here) sees the request: the
  // retry script finds it, and the task ends cancelled instead of being retried under a new id.
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}", {.max_retries = 3, .retention = Retention{.done = 1h}});
  std::atomic<bool> started{false}, fail{false};
  std::atomic<int> attempts{0};
  ConsumerOptions o = options();
  o.heartbeat_interval = 5s;
  o.claim_min_idle = 30s;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("t", [&](const Task&) {
      ++attempts;
      started = true;
      while (!fail) std::this_thread::sleep_for(5ms);
      throw std::runtime_error("down");
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  fail = true;
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  std::this_thread::sleep_for(200ms);
  worker.stop();
  EXPECT_EQ(attempts.load(), 1);
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(xlen(dlq), 0);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0);
  EXPECT_EQ(client.cmd({"KEYS", stream + ":cancel:*"}).view().size(), 0U);
  EXPECT_EQ(in.record(stream, id)->state, TaskRecord::State::cancelled);
}

TEST_F(ControlTest, ACancelBeforeTheHandlerStartsKeepsItFromRunning) {
  // One handler thread, busy with the first task; the second waits in the prefetch when the
  // cancel comes, and is found cancelled (by the cancel follower or a lease renewal) before it
  // starts.
  Producer p = producer();
  p.enqueue("block", "{}");
  const std::string second = p.enqueue("t", "{}");
  std::atomic<bool> blocking{false}, release{false};
  std::atomic<int> ran{0};
  ConsumerOptions o = fast();
  o.concurrency = 1;
  LogCapture log(LogLevel::info);  // (it outlives the worker, which logs to it)
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("block", [&](const Task&) {
      blocking = true;
      while (!release) std::this_thread::sleep_for(10ms);
    });
    c.on("t", [&](const Task&) { ++ran; });
  });
  ASSERT_TRUE(wait_until([&] { return blocking.load(); }, 10s));
  // Both read (the worker keeps one entry waiting behind its busy handler; it may come in a
  // read of its own, after the first).
  ASSERT_TRUE(wait_until([&] { return pending() == 2; }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, second), CancelOutcome::running);  // delivered: in the prefetch
  // The worker noticed it (the cancel follower or a lease renewal), once, before it was freed.
  // ("task <id> (entry <entry id> of <stream>) was cancelled by an operator before its handler
  // started; it will not run")
  const std::string noticed = "task " + second + " (entry ";
  ASSERT_TRUE(wait_until([&] { return log.count(LogLevel::info, noticed) == 1; }, 10s));
  release = true;
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(log.count(LogLevel::info, noticed), 1U) << "a request found again is not news";
}

// The worker holding a tracked task was killed; the task was cancelled while nobody ran it: the
// worker that reclaims it must end it cancelled, not run it to done, and its request goes.
// Another worker reclaims it once its lease ended.
TEST_F(ControlTest, ACancelReachesTheWorkerThatReclaimsTheTask) {
  expect_the_next_holder_ends_a_cancel_cancelled(fast());
}

// The dead worker restarted under its name replays its own pending entry at once.
TEST_F(ControlTest, ACancelReachesTheRestartedHolderThatReplaysTheTask) {
  ConsumerOptions o = fast();
  o.claim_min_idle = 60s;  // (no reclaim meanwhile: the replay is what ends it)
  o.consumer_name = "killed-worker";
  expect_the_next_holder_ends_a_cancel_cancelled(o);
}

/// A handler of "t" that waits for its stop request: whether it started, its stop reason, and
/// when it saw the request.
struct StopSeen {
  std::atomic<bool> started{false};
  std::atomic<std::int64_t> at_ns{0};  // steady clock; 0 until then
  std::string why;

  void on(Consumer& c) {
    c.on("t", [this](const Task& task) {
      started = true;
      why = wait_for_stop(task, 30s);
      at_ns = std::chrono::steady_clock::now().time_since_epoch().count();
    });
  }
  bool seen() const { return at_ns.load() != 0; }
  /// How long after `asked` the handler saw its stop request.
  std::chrono::milliseconds after(std::chrono::steady_clock::time_point asked) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(at_ns.load())) - asked);
  }
};

// A worker whose cancel follower cannot read the pushes (here its ACL user may not XREAD; a
// follower reconnecting misses them the same way) still stops a cancelled task: its next lease
// renewal finds the request, within heartbeat_interval.
TEST_F(ControlTest, ACancelTheFollowerMissedIsFoundByTheNextLeaseRenewal) {
  client.cmd({"ACL", "SETUSER", "no-follow", "on", ">secret", "~*", "&*", "+@all", "-xread"}).view().check();
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}", {.retention = Retention{.done = 1h}});
  StopSeen stop;
  ConsumerOptions o = options();
  o.connection.url = "redis://no-follow:secret@127.0.0.1:" + std::to_string(server.port());
  o.heartbeat_interval = 1s;
  o.claim_min_idle = 60s;
  LogCapture log(LogLevel::info);  // (it outlives the worker, which logs to it)
  RunningConsumer worker(o, [&](Consumer& c) { stop.on(c); });
  ASSERT_TRUE(wait_until([&] { return stop.started.load(); }, 10s));
  const auto follower_failed = [&] {
    for (const auto& [level, line] : log.lines()) {
      if (line.starts_with("cancel follower: ") && line.find("NOPERM") != std::string::npos) return true;
    }
    return false;
  };
  ASSERT_TRUE(wait_until(follower_failed, 10s)) << "the follower was not refused its read";
  Inspector in({.connection = {.url = server.url()}});
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return stop.seen(); }, 30s)) << "the cancel never arrived";
  const auto took = stop.after(asked);
  std::cout << "a cancel found by the lease renewal stopped its task " << took.count()
            << " ms after the request (heartbeat_interval 1000 ms)\n";
  // Within one renewal (a second here); the bound is loose for the sanitizer builds.
  EXPECT_LT(took, 3s);
  EXPECT_EQ(stop.why, "cancelled");
  worker.stop();
  EXPECT_EQ(worker.consumer().metrics().cancelled, 1U);
}

// A cancel is pushed to the holder: it reaches a running handler long before the holder's next
// lease renewal (every 10 s here), and a waiter is told the task was cancelled.
TEST_F(ControlTest, ACancelReachesARunningHandlerWithoutWaitingForTheLeaseRenewal) {
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}", {.retention = Retention{.done = 1h}});
  StopSeen stop;
  ConsumerOptions o = options();
  o.heartbeat_interval = 10s;
  o.claim_min_idle = 60s;
  RunningConsumer worker(o, [&](Consumer& c) { stop.on(c); });
  ASSERT_TRUE(wait_until([&] { return stop.started.load(); }, 10s));
  std::this_thread::sleep_for(300ms);  // its subscription is up (it was before the task ran)
  Inspector in({.connection = {.url = server.url()}});
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return stop.seen(); }, 30s));
  const auto took = stop.after(asked);
  // The push takes a few milliseconds; the renewal would have taken up to 10 s. (The bound is
  // loose for the sanitizer builds.)
  EXPECT_LT(took, 3s) << "the cancel waited for the lease renewal";
  EXPECT_EQ(stop.why, "cancelled");
  try {
    p.wait(id, 10s);
    ADD_FAILURE() << "a cancelled task's wait did not throw";
  } catch (const TaskFailedError& e) {
    EXPECT_EQ(e.record().state, TaskRecord::State::cancelled);
    EXPECT_NE(std::string(e.what()).find("cancel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace streamq::test
