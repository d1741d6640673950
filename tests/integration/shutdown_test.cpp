// SPDX-License-Identifier: MIT
// Stopping a worker: stop() returns promptly from a blocking read; running handlers see the
// stop request and finish within the grace period while the entries not started are released for
// another worker at once; a handler past the grace period keeps its entry and blocks neither run()
// nor the destructor; the signal handlers it installed are replaced by the previous ones. As a
// process: SIGTERM finishes the running tasks and exits cleanly, a second SIGTERM ends the grace
// period at once.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "consumer_fixture.hpp"
#include "control_fixture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(ConsumerTest, StopReturnsPromptlyFromABlockingRead) {
  auto o = options();
  o.block = 10s;
  o.connection.socket_timeout = 12s;
  RunningConsumer rc(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
  ASSERT_TRUE(wait_until([&] {
    return std::string(client.cmd({"CLIENT", "LIST"}).view().str()).find("cmd=xreadgroup") !=
           std::string::npos;
  }));
  const auto start = std::chrono::steady_clock::now();
  rc.stop();
  // Without CLIENT UNBLOCK this would take up to the 10 s BLOCK.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(ConsumerTest, GracefulShutdownFinishesRunningAndReleasesTheRest) {
  auto p = producer();
  for (int i = 0; i < 12; ++i) p.enqueue("work", "{}");
  std::atomic<int> started{0}, finished{0};
  auto o = options();
  o.concurrency = 4;
  o.prefetch = 12;
  o.shutdown_grace = 5s;
  {
    RunningConsumer rc(o, [&](Consumer& c) {
      c.on("work", [&](const Task&) {
        ++started;
        std::this_thread::sleep_for(300ms);  // the task's own work
        ++finished;
      });
    });
    ASSERT_TRUE(wait_until([&] { return started >= 4; }));
    rc.stop();
    EXPECT_EQ(started, finished);  // every started handler ran to its end
    EXPECT_EQ(rc.consumer().metrics().done, static_cast<std::uint64_t>(finished.load()));
  }
  const int done_first = finished;
  EXPECT_LT(done_first, 12);
  EXPECT_EQ(xlen(stream), 12 - done_first);
  // The rest were released: a new worker (default claim_min_idle of 30 s) takes them at once,
  // and as they never ran, this is their first attempt.
  std::atomic<int> second{0}, not_first{0};
  RunningConsumer rc2(options(), [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      ++second;
      if (t.deliveries() != 1) ++not_first;
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }));
  EXPECT_EQ(second, 12 - done_first);
  EXPECT_EQ(not_first, 0);
}

TEST_F(ConsumerTest, HandlersSeeTheStopRequest) {
  producer().enqueue("long", "{}");
  std::atomic<bool> started{false}, saw_stop{false};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      started = true;
      wait_for_stop(t, 60s);  // returns early when its worker stops
      saw_stop = t.stop_requested();
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  const auto t0 = std::chrono::steady_clock::now();
  rc.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // not the handler's 60 s
  EXPECT_TRUE(saw_stop);
  EXPECT_EQ(rc.consumer().metrics().done, 1u);
  EXPECT_EQ(xlen(stream), 0);
}

TEST_F(ConsumerTest, HandlerPastTheGracePeriodKeepsItsEntryAndBlocksNeitherRunNorTheDestructor) {
  producer().enqueue("stuck", "{}");
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> started{false}, handler_returned{false}, destroyed{false};
  std::string name;
  auto o = options();
  o.shutdown_grace = 200ms;
  {
    auto rc = std::make_unique<RunningConsumer>(o, [&](Consumer& c) {
      c.on("stuck", [&](const Task&) {
        started = true;
        {
          std::unique_lock lock(m);
          cv.wait(lock, [&] { return release; });  // ignores the stop request
        }
        // Last, after the unlock: once the test sees it, it ends, and m (on its stack) is gone.
        handler_returned = true;
      });
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    name = rc->consumer().name();  // chosen at start
    // If stop() or the destructor waited for the handler, this would open it after 20 s.
    std::thread watchdog([&] {
      std::unique_lock lock(m);
      if (!cv.wait_for(lock, 20s, [&] { return destroyed.load(); })) release = true;
      cv.notify_all();
    });
    rc->stop();  // run() returns after the grace period
    rc.reset();  // ~Consumer
    destroyed = true;
    cv.notify_all();
    watchdog.join();
  }
  EXPECT_FALSE(handler_returned) << "run() or ~Consumer waited for the handler";
  // Its entry is still pending, owned by the stopped consumer and not released.
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  const auto entry = pending_entry(entries[0].first);
  EXPECT_EQ(entry.owner, name);
  EXPECT_LT(entry.idle_ms, 60000);
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(wait_until([&] { return handler_returned.load(); }));
  // Nobody wrote its completion: another worker reclaims it after claim_min_idle.
  std::atomic<int> reran{0};
  auto o2 = options();
  o2.claim_min_idle = 300ms;
  o2.heartbeat_interval = 100ms;
  o2.reclaim_interval = 50ms;
  RunningConsumer again(o2, [&](Consumer& c) { c.on("stuck", [&](const Task&) { ++reran; }); });
  ASSERT_TRUE(wait_until([&] { return reran == 1 && xlen(stream) == 0 && pending() == 0; }));
}

// A deploy does not burn a retry: a handler that throws after its worker asked it to stop
// (stop_reason() "shutdown") hands its task back: queued again at once with its retry count as it
// was, its record queued, no backoff. Here the task has no retry left, so counting the
// interrupted attempt would have dead-lettered it.
TEST_F(ConsumerTest, AHandlerThatThrowsAtShutdownHandsItsTaskBack) {
  const std::string id =
      producer().enqueue("long", "{}", {.max_retries = 0, .retention = Retention{.done = 1h}});
  std::atomic<bool> started{false};
  std::string why;
  {
    auto o = options();
    o.retry_backoff = {.base = std::chrono::hours(1),
                       .cap = std::chrono::hours(1),
                       .jitter = false};  // a counted retry would wait
    RunningConsumer rc(o, [&](Consumer& c) {
      c.on("long", [&](const Task& t) {
        started = true;
        why = wait_for_stop(t, 60s);
        throw std::runtime_error("interrupted by the deploy");
      });
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    rc.stop();
    EXPECT_EQ(rc.consumer().metrics().retried, 0U);
    EXPECT_EQ(rc.consumer().metrics().dead_lettered, 0U);
    EXPECT_EQ(rc.consumer().metrics().handed_back, 1U);
  }
  EXPECT_EQ(why, "shutdown");
  EXPECT_EQ(xlen(dlq), 0);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0) << "no backoff";
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), id);
  EXPECT_EQ(Client::get(entries[0].second, "retry_count"), "0");
  // (The stopping worker's read may have taken the new entry: then it released it with the rest.)
  const auto held = pending_entry(entries[0].first);
  EXPECT_TRUE(held.owner.empty() || held.idle_ms > 1'000'000'000) << "held by " << held.owner;
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.record(stream, id)->state, TaskRecord::State::queued);
  // The next worker runs it as the same attempt of the task's retries.
  std::atomic<int> retry_count{-1};
  RunningConsumer next(
      options(), [&](Consumer& c) { c.on("long", [&](const Task& t) { retry_count = t.retry_count(); }); });
  ASSERT_TRUE(wait_until([&] { return in.record(stream, id)->state == TaskRecord::State::done; }));
  EXPECT_EQ(retry_count.load(), 0);
}

// HandlerOptions::hand_back_on_shutdown = false: a type that must count every start counts
// the interrupted one as a failed attempt, as any failure.
TEST_F(ConsumerTest, ATypeMayCountAnAttemptInterruptedByShutdown) {
  const std::string id =
      producer().enqueue("long", "{}", {.max_retries = 3, .retention = Retention{.done = 1h}});
  std::atomic<bool> started{false};
  {
    RunningConsumer rc(options(), [&](Consumer& c) {
      c.on("long",
           [&](const Task& t) {
             started = true;
             wait_for_stop(t, 60s);  // returns early when its worker stops
             throw std::runtime_error("interrupted by the deploy");
           },
           {.hand_back_on_shutdown = false});
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    rc.stop();
    EXPECT_EQ(rc.consumer().metrics().retried, 1U);
    EXPECT_EQ(rc.consumer().metrics().handed_back, 0U);
  }
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(Client::get(entries[0].second, "retry_count"), "1");
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.record(stream, id)->state, TaskRecord::State::retrying);
}

TEST_F(ConsumerTest, PreviousSignalHandlersAreRestored) {
  struct sigaction custom {
  }, before_int{}, before_term{};
  custom.sa_handler = [](int) {};
  sigemptyset(&custom.sa_mask);
  ASSERT_EQ(sigaction(SIGINT, &custom, &before_int), 0);
  ASSERT_EQ(sigaction(SIGTERM, &custom, &before_term), 0);
  auto current = [](int sig) {
    struct sigaction now {};
    sigaction(sig, nullptr, &now);
    return now.sa_handler;
  };
  {
    auto o = options();
    o.stop_on_signals = true;
    RunningConsumer rc(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
    // While run() runs, the consumer's handlers are installed ...
    ASSERT_TRUE(wait_until(
        [&] { return current(SIGINT) != custom.sa_handler && current(SIGTERM) != custom.sa_handler; }));
  }
  // ... and afterwards the previous ones are back.
  EXPECT_EQ(current(SIGINT), custom.sa_handler);
  EXPECT_EQ(current(SIGTERM), custom.sa_handler);
  sigaction(SIGINT, &before_int, nullptr);
  sigaction(SIGTERM, &before_term, nullptr);
}

TEST(Reliability, SigtermFinishesRunningTasksAndExitsCleanly) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  std::vector<TaskSpec> batch(20, TaskSpec{"work", R"({"ms":300})"});
  producer.enqueue_batch(batch);
  WorkerProcess worker({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0", "concurrency=2", "prefetch=8"});
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) >= 2; }));
  const int status = worker.signal_and_wait(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // Everything it ran was acknowledged before it exited ...
  const auto done_after_stop = client.integer({"HLEN", stream + ":done"});
  EXPECT_EQ(client.integer({"XLEN", stream}), 20 - done_after_stop);
  // ... and every entry it held unstarted was released (idle set far in the past).
  for (const auto& [id, owner_idle] : pending_entries(client, stream)) {
    EXPECT_GT(owner_idle.second, 1'000'000'000) << id << " of " << owner_idle.first << " was not released";
  }
  // So a worker under another name takes them at once, although its claim_min_idle is ten
  // minutes: this wait is far shorter.
  WorkerProcess other(
      {STREAMQ_TEST_WORKER, server.url(), stream, "slot-1", "min_idle_ms=600000", "heartbeat_ms=200000"});
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"HLEN", stream + ":done"}) == 20 && client.integer({"XLEN", stream}) == 0 &&
               pending(client, stream) == 0;
      },
      60s));
}

TEST(Reliability, SecondSigtermEndsTheGracePeriodAtOnce) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string log = server.dir() + "/worker.log";
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  producer.enqueue("hang", R"({"ms":600000})");
  WorkerProcess worker({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0", "grace_ms=600000"}, log);
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":started"}) == 1; }));
  worker.signal(SIGTERM);
  // The first signal must have been taken before the second is sent (two pending SIGTERMs
  // would merge into one).
  ASSERT_TRUE(wait_until([&] { return slurp(log).find("stop signal") != std::string::npos; }));
  EXPECT_EQ(worker.wait_exit(500ms), -1) << "exited before the grace period was cut short";
  worker.signal(SIGTERM);
  const int status = worker.wait_exit(20s);  // the grace period is ten minutes
  ASSERT_NE(status, -1) << "the second SIGTERM did not end the grace period";
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The task that was still running keeps its entry: pending under the worker's name, not
  // released, so nobody else starts it before claim_min_idle.
  const auto entries = pending_entries(client, stream);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries.begin()->second.first, "slot-0");
  EXPECT_LT(entries.begin()->second.second, 600000);
  EXPECT_EQ(client.integer({"HLEN", stream + ":done"}), 0);
}

}  // namespace
}  // namespace streamq::test
