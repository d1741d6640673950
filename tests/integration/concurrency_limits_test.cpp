// SPDX-License-Identifier: MIT
// Concurrency limits: a limit of a task type or of the whole queue holds across workers, and
// max_in_flight within one; the slot of a holder killed with SIGKILL frees itself after
// claim_min_idle while the limit still holds; bad control options are configuration errors.
#include <signal.h>

#include <chrono>
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
        "limit=3", "min_idle_ms=1500", "heartbeat_ms=300"}));
  }
  // Kill a worker that holds a slot (its handler is running), then take its marks out of the
  // measurement: its slot still counts against the limit until it expires, so no one else
  // starts in its place meanwhile.
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
  const detail::Reply members = client.cmd({"SMEMBERS", marks});
  for (std::size_t i = 0; i < members.view().size(); ++i) {
    const std::string m(members.view()[i].str());
    if (m.starts_with(victim + "/")) client.cmd({"SREM", marks, m});
  }
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) == kTasks; }, 120s));
  EXPECT_EQ(std::string(client.cmd({"GET", stream + ":most"}).view().str()), "3");
  EXPECT_EQ(xlen(dlq), 0);
  for (auto& proc : procs) {
    if (!proc->died()) proc->signal_and_wait(SIGTERM);
  }
  // Given back by the live workers; the dead one's expired (its key goes after claim_min_idle
  // without a renewal).
  EXPECT_TRUE(wait_until([&] { return client.integer({"ZCARD", stream + ":running:limited"}) == 0; }, 10s));
}

}  // namespace
}  // namespace streamq::test
