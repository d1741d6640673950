// SPDX-License-Identifier: MIT
// A rate limit is one window for the whole queue: every worker, partition and priority level
// draws on it, and it admits no more starts than its limit, even when the entries of those
// streams share ids and start in the same millisecond.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

// Three partitions of three levels each hold entries 1-1, 1-2 and 1-3 (27 tasks whose ids
// repeat nine times); two workers of one consumer name each per partition start them at once
// against a limit of 4 per minute. Exactly 4 run; the others are put back unrun.
TEST_F(ConsumerTest, ARateLimitAdmitsNoMoreThanItsLimitAcrossPartitionsAndLevels) {
  constexpr int kPartitions = 3;
  constexpr int kLimit = 4;
  std::string base = stream;
  std::erase(base, '{');
  std::erase(base, '}');
  int tasks = 0;
  for (int p = 0; p < kPartitions; ++p) {
    const std::string part = "{" + base + ":" + std::to_string(p) + "}";
    for (const std::string& level : {part + ":p:high", part, part + ":p:low"}) {
      for (const char* id : {"1-1", "1-2", "1-3"}) {
        client
            .cmd({"XADD", level, id, "task_id", "t" + std::to_string(++tasks), "task_type", "call_api", "payload",
                  "{}", "created_at", "2026-12-03T00:00:00.000000", "max_retries", "3", "retry_count", "0"})
            .view()
            .check();
      }
    }
  }
  std::atomic<int> ran{0};
  std::vector<std::unique_ptr<RunningConsumer>> workers;
  for (int w = 0; w < 2; ++w) {
    ConsumerOptions o = options();
    o.partitions = kPartitions;
    o.concurrency = 9;
    o.consumer_name = "w" + std::to_string(w);
    workers.push_back(std::make_unique<RunningConsumer>(o, [&](Consumer& c) {
      c.on("call_api", [&](const Task&) { ++ran; }, {.rate = {.limit = kLimit, .per = 1min}});
    }));
  }
  // Every task either ran or was put back (into the delayed set, due when the window has room).
  const auto settled = [&] {
    std::uint64_t put_back = 0;
    for (auto& w : workers) put_back += w->consumer().metrics().rate_limited;
    return ran.load() + static_cast<int>(put_back) == tasks;
  };
  ASSERT_TRUE(wait_until(settled, 20s));
  for (auto& w : workers) w->stop();
  EXPECT_EQ(ran.load(), kLimit);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":rate:call_api"}), kLimit);
}

}  // namespace
}  // namespace streamq::test
