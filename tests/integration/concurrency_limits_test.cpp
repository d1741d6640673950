// SPDX-License-Identifier: MIT
// Concurrency limits: a limit of a task type or of the whole queue holds across workers, and
// max_in_flight within one; the slot of a holder killed with SIGKILL frees itself after
// claim_min_idle while the limit still holds; bad control options are configuration errors.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "control_fixture.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(ControlTest, AConcurrencyLimitHoldsAcrossWorkers) {
  const int most = most_at_once(4, 3, 40, fast(), {.concurrency = {.limit = 3}});
  EXPECT_EQ(most, 3);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":running:t"}), 0) << "every slot was given back";
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ControlTest, AQueueConcurrencyLimitHoldsAcrossWorkers) {
  ConsumerOptions o = fast();
  o.concurrency_limit = {.limit = 2};
  EXPECT_EQ(most_at_once(3, 3, 30, o, {}), 2);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":running"}), 0);
}

TEST_F(ControlTest, MaxInFlightLimitsOneConsumer) {
  EXPECT_EQ(most_at_once(1, 4, 20, fast(), {.max_in_flight = 1}), 1);
}

TEST_F(ControlTest, BadControlOptionsAreConfigErrors) {
  Consumer c(options());
  EXPECT_THROW(c.on("a", [](const Task&) {}, {.timeout = -1ms}), ConfigError);
  EXPECT_THROW(c.on("b", [](const Task&) {}, {.concurrency = {.limit = -1}}), ConfigError);
  EXPECT_THROW(c.on("c", [](const Task&) {}, {.max_in_flight = -1}), ConfigError);
  ConsumerOptions o = options();
  o.timeout_grace = 0ms;
  EXPECT_THROW(Consumer{o}, ConfigError);
  o = options();
  o.concurrency_limit = {.limit = -2};
  EXPECT_THROW(Consumer{o}, ConfigError);
}

// 8 worker processes share a limit of 3 on 48 tasks of 300 ms; one is killed with SIGKILL while
// it holds a slot. The most running at once, measured by the handlers in Redis, is 3; every
// task is done; the dead holder's slot frees itself after claim_min_idle.
TEST_F(ControlTest, AConcurrencyLimitHoldsUnderKillOfAHolder) {
  constexpr int kWorkers = 8, kTasks = 48;
  Producer p = producer();
  std::vector<std::string> ids;
  for (int i = 0; i < kTasks; ++i) ids.push_back(p.enqueue("limited", R"({"ms":300})"));
  const std::string marks = stream + ":now-running";  // the handlers' own record (test_worker)
  std::vector<std::unique_ptr<WorkerProcess>> procs;
  for (int i = 0; i < kWorkers; ++i) {
    procs.push_back(std::make_unique<WorkerProcess>(std::vector<std::string>{
        STREAMQ_TEST_WORKER, server.url(), stream, "w" + std::to_string(i), "concurrency=2", "prefetch=2",
        "limit=3", "min_idle_ms=3000", "heartbeat_ms=300"}));
  }
  // Kill a worker that holds a slot (its handler is running), then take its marks out of the
  // measurement: its slot still counts against the limit until it expires, so no one else
  // starts in its place meanwhile. Its other handler thread may have sent a mark just before
  // the kill that the server runs after this: naming it in <stream>:killed, in the same script
  // that takes its marks out, keeps such a mark out. (CI once measured 4 here, on Redis 6.2 with a
  // 3 s lease, and earlier on hiredis 1.4 with a 1.5 s lease: a late mark of the dead worker
  // counted beside the three live ones that ran after its slot expired.)
  std::string victim;
  ASSERT_TRUE(wait_until(
      [&] {
        const detail::Reply r = client.cmd({"SRANDMEMBER", marks});
        if (!r.view().is_string()) return false;
        victim = std::string(r.view().str());
        return true;
      },
      30s));
  victim = victim.substr(0, victim.find('/'));
  const int index = std::stoi(victim.substr(1));
  procs[static_cast<std::size_t>(index)]->kill9();
  client
      .cmd({"EVAL",
            "redis.call('SADD', KEYS[2], ARGV[1]) "
            "for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do "
            "  if string.sub(m, 1, #ARGV[1] + 1) == ARGV[1] .. '/' then redis.call('SREM', KEYS[1], m) end "
            "end",
            "2", marks, stream + ":killed", victim})
      .view()
      .check();
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) == kTasks; }, 120s));
  EXPECT_EQ(std::string(client.cmd({"GET", stream + ":most"}).view().str()), "3");
  EXPECT_EQ(client.integer({"SCARD", marks}), 0) << "a mark left behind counted in every later measure";
  EXPECT_EQ(xlen(dlq), 0);
  for (auto& proc : procs) {
    if (!proc->died()) proc->signal_and_wait(SIGTERM);
  }
  // Given back by the live workers; the dead one's expired (its key goes after claim_min_idle
  // without a renewal).
  EXPECT_TRUE(wait_until([&] { return client.integer({"ZCARD", stream + ":running:limited"}) == 0; }, 10s));
}

// A holder fences itself. Its slot went (another worker's acquire dropped it as expired while
// the holder was frozen, or the key was lost in a failover): the renewal is refused, and the
// task is stopped (stop_reason() "lease_lost") and put back unrun: not a failed attempt.
TEST_F(ControlTest, AHolderWhoseSlotIsGoneStopsItsTaskAndPutsItBack) {
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}", {.max_retries = 0, .retention = Retention{.done = 1h}});
  std::atomic<int> runs{0};
  std::string why;
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("t",
         [&](const Task& task) {
           if (++runs > 1) return;
           why = wait_for_stop(task, 20s);
           throw std::runtime_error("stopped");
         },
         {.concurrency = {.limit = 1}});
  });
  ASSERT_TRUE(wait_until([&] { return runs.load() == 1; }, 10s));
  ASSERT_TRUE(wait_until([&] { return client.integer({"ZCARD", stream + ":running:t"}) == 1; }, 10s));
  client.cmd({"DEL", stream + ":running:t"});  // the slot is gone
  Inspector in({.connection = {.url = server.url()}});
  ASSERT_TRUE(wait_until([&] { return in.record(stream, id)->state == TaskRecord::State::done; }, 20s));
  worker.stop();
  EXPECT_EQ(why, "lease_lost");
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(worker.consumer().metrics().retried, 0U) << "a fenced attempt is not a failure";
  EXPECT_EQ(xlen(dlq), 0) << "max_retries 0: a counted failure would have dead-lettered it";
}

// What the fence cannot prevent, measured: a holder whose whole process is frozen (SIGSTOP) past
// its slot's lease signals nothing while frozen; another worker takes the slot; once resumed, the
// frozen holder's handler runs on until the fence's time, long past, is seen. The test measures
// that window (printed; docs/control.md quotes it) and bounds it loosely.
TEST_F(ControlTest, AFrozenHoldersHandlerStopsSoonAfterItResumes) {
  Producer p = producer();
  const std::string first = p.enqueue("fenced", R"({"ms":60000})");
  const std::vector<std::string> settings{"concurrency=1", "prefetch=1", "limit=1", "min_idle_ms=1500",
                                          "heartbeat_ms=300"};
  const auto worker = [&](const std::string& name) {
    std::vector<std::string> args{STREAMQ_TEST_WORKER, server.url(), stream, name};
    args.insert(args.end(), settings.begin(), settings.end());
    return std::make_unique<WorkerProcess>(args);
  };
  auto frozen = worker("frozen");
  const std::string running = stream + ":now-running";
  ASSERT_TRUE(wait_until([&] { return client.integer({"SCARD", running}) == 1; }, 20s));
  frozen->signal(SIGSTOP);
  p.enqueue("fenced", R"({"ms":60000})");
  auto other = worker("other");
  // The frozen holder's lease ends; the other worker takes the slot (and maybe the entry).
  ASSERT_TRUE(wait_until([&] { return client.integer({"SCARD", running}) == 2; }, 20s));
  const auto resumed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  frozen->signal(SIGCONT);
  const std::string stopped = stream + ":stopped:" + first;
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stopped}) == 1; }, 20s));
  const std::string seen(client.cmd({"GET", stopped}).view().str());
  const std::int64_t window = std::stoll(seen.substr(0, seen.find(' '))) - resumed.count();
  std::cout << "a frozen holder's handler ran on for " << window << " ms after it resumed ("
            << seen.substr(seen.find(' ') + 1) << ")\n";
  RecordProperty("ran_on_after_resume_ms", std::to_string(window));
  EXPECT_EQ(seen.substr(seen.find(' ') + 1), "lease_lost");
  EXPECT_LT(window, 3000) << "the fence did not stop the resumed holder's task";
  frozen->signal_and_wait(SIGTERM);
  other->signal_and_wait(SIGTERM);
}

}  // namespace
}  // namespace streamq::test
