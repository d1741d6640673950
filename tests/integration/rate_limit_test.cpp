// SPDX-License-Identifier: MIT
// A rate limit is one window for the whole queue: every worker, partition and priority level
// draws on it, and it admits no more starts than its limit, even when the entries of those
// streams share ids and start in the same millisecond; a task that has to wait is put back, not
// failed, dead-lettered or charged a retry.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "log_capture.hpp"
#include "running_consumer.hpp"
#include "scheduling_fixture.hpp"

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

// Three workers share one limit: no window of `per` holds more than `limit` starts, and no
// task is failed, dead-lettered or charged a retry for waiting. The starts are read from the
// limit's own window (`<stream>:rate:<type>`, scored by the server's clock when each start was
// allowed), polled faster than its entries expire, so the windows are measured exactly.
TEST_F(SchedulingTest, ARateLimitHoldsAcrossWorkersAndLosesNothing) {
  constexpr int kTasks = 90;
  constexpr int kLimit = 15;
  constexpr auto kPer = 400ms;
  Producer p = producer();
  for (int i = 0; i < kTasks; ++i) p.enqueue("call_api", "{}");
  std::mutex m;
  std::map<std::string, int> runs;
  std::atomic<int> charged{0};
  std::atomic<bool> done{false};
  std::map<std::string, std::int64_t> starts;  // the window's members: start -> server ms
  std::thread poller([&] {
    Client c(server.url());
    // An entry stays in the window at least `per`: polling at a quarter of it sees every one.
    // It polls once more after `done`, which is set once every consumer stopped.
    for (;;) {
      const bool last = done.load();
      const detail::Reply r = c.cmd({"ZRANGE", stream + ":rate:call_api", "0", "-1", "WITHSCORES"});
      const auto v = r.view().check();
      for (std::size_t i = 0; i + 1 < v.size(); i += 2) {
        starts[std::string(v[i].str())] = std::stoll(std::string(v[i + 1].str()));
      }
      if (last) break;
      std::this_thread::sleep_for(kPer / 4);  // the polling period, not a wait for an outcome
    }
  });
  std::vector<std::unique_ptr<RunningConsumer>> consumers;
  for (int c = 0; c < 3; ++c) {
    ConsumerOptions o = options();
    o.consumer_name = "w" + std::to_string(c);
    consumers.push_back(std::make_unique<RunningConsumer>(o, [&](Consumer& consumer) {
      consumer.on("call_api",
                  [&](const Task& t) {
                    if (t.retry_count() != 0) ++charged;
                    std::lock_guard lock(m);
                    ++runs[t.id()];
                  },
                  {.rate = {.limit = kLimit, .per = kPer}});
    }));
  }
  const bool all_ran = wait_until(
      [&] {
        std::lock_guard lock(m);
        return runs.size() >= kTasks;
      },
      30s);
  std::uint64_t limited = 0;
  for (auto& c : consumers) {
    limited += c->consumer().metrics().rate_limited;
    c->stop();
  }
  done = true;
  poller.join();
  ASSERT_TRUE(all_ran);
  std::lock_guard lock(m);
  EXPECT_EQ(runs.size(), static_cast<std::size_t>(kTasks));
  for (const auto& [id, n] : runs) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(charged.load(), 0);
  EXPECT_GT(limited, 0u) << "90 tasks at 15 per 400 ms must have waited";
  EXPECT_EQ(xlen(dlq), 0);
  // Every start the limit allowed, once each, and no more than the handlers ran.
  ASSERT_EQ(starts.size(), static_cast<std::size_t>(kTasks));
  std::vector<std::int64_t> at;
  for (const auto& [member, ms] : starts) at.push_back(ms);
  std::sort(at.begin(), at.end());
  std::size_t most = 0;
  for (std::size_t i = 0, j = 0; i < at.size(); ++i) {
    while (j < at.size() && at[j] < at[i] + kPer.count()) ++j;
    most = std::max(most, j - i);
  }
  std::printf(
      "[ rate     ] %d tasks, limit %d per %lld ms, 3 workers: at most %zu starts in a window, "
      "%llu put back\n",
      kTasks, kLimit, static_cast<long long>(kPer.count()), most, static_cast<unsigned long long>(limited));
  EXPECT_EQ(most, static_cast<std::size_t>(kLimit));  // the limit is reached, and never passed
  // 90 tasks at 15 per window need more than 5 windows from the first start to the last.
  EXPECT_GE(at.back() - at.front(), 5 * kPer.count());
}

// The limit cannot be checked (its key holds a string, so the check fails with WRONGTYPE, as it
// fails when Redis is out of reach): the task is put back for a second each time, never run
// unchecked and never charged an attempt; once the check works again, it runs.
TEST_F(ConsumerTest, ATaskWhoseRateLimitCannotBeCheckedIsPutBackNotRunUnchecked) {
  const std::string window = stream + ":rate:call_api";
  client.cmd({"SET", window, "not a window"}).view().check();
  producer().enqueue("call_api", "{}", {.max_retries = 0});
  std::atomic<int> ran{0};
  LogCapture log(LogLevel::info);  // (it outlives the worker, which logs to it)
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on("call_api", [&](const Task&) { ++ran; }, {.rate = {.limit = 5, .per = 1min}});
  });
  const auto put_back = [&] {
    return log.count(LogLevel::warning, "rate limit of \"call_api\" could not be checked");
  };
  ASSERT_TRUE(wait_until([&] { return put_back() >= 2; }, 10s)) << "the check did not fail twice";
  EXPECT_EQ(ran.load(), 0) << "run with its limit unchecked";
  client.cmd({"DEL", window}).view().check();
  ASSERT_TRUE(wait_until([&] { return ran.load() == 1 && pending() == 0 && xlen(stream) == 0; }, 10s));
  worker.stop();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(xlen(dlq), 0) << "max_retries 0: a counted attempt would have dead-lettered it";
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
}

}  // namespace
}  // namespace streamq::test
