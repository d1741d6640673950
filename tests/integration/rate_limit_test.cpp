// SPDX-License-Identifier: MIT
// A rate limit is one window for the whole queue: every worker, partition and priority level
// draws on it, and it admits no more starts than its limit, even when the entries of those
// streams share ids and start in the same millisecond.
#include <atomic>
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

// Three partitions of three levels each hold an entry 1-1 (9 tasks of one id); a worker of
// 9 handler threads (weighted order: no level waits for another) starts them at once against a
// limit of 2 per minute. Exactly 2 run; the others are put back unrun. Five rounds, on five
// queues: starts of one id in one millisecond are likely in each.
TEST_F(ConsumerTest, ARateLimitAdmitsNoMoreThanItsLimitAcrossPartitionsAndLevels) {
  constexpr int kPartitions = 3;
  constexpr int kLimit = 2;
  for (int round = 0; round < 5; ++round) {
    const std::string queue = stream + "-" + std::to_string(round);
    std::string base = queue;
    std::erase(base, '{');
    std::erase(base, '}');
    int tasks = 0;
    for (int p = 0; p < kPartitions; ++p) {
      const std::string part = "{" + base + ":" + std::to_string(p) + "}";
      for (const std::string& level : {part + ":p:high", part, part + ":p:low"}) {
        client
            .cmd({"XADD", level, "1-1", "task_id", "t" + std::to_string(++tasks), "task_type", "call_api",
                  "payload", "{}", "created_at", "2026-12-03T00:00:00.000000", "max_retries", "3",
                  "retry_count", "0"})
            .view()
            .check();
      }
    }
    std::atomic<int> ran{0};
    ConsumerOptions o = options();
    o.stream = queue;
    o.partitions = kPartitions;
    o.concurrency = 3 * kPartitions;
    o.priority_weights = {1, 1, 1};
    RunningConsumer worker(o, [&](Consumer& c) {
      c.on("call_api", [&](const Task&) { ++ran; }, {.rate = {.limit = kLimit, .per = 1min}});
    });
    // Every task either ran or was put back (into the delayed set, due when the window has room).
    ASSERT_TRUE(wait_until(
        [&] { return ran.load() + static_cast<int>(worker.consumer().metrics().rate_limited) == tasks; },
        20s));
    worker.stop();
    EXPECT_EQ(ran.load(), kLimit) << "round " << round;
    EXPECT_EQ(client.integer({"ZCARD", queue + ":rate:call_api"}), kLimit) << "round " << round;
  }
}

}  // namespace
}  // namespace streamq::test
