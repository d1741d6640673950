// SPDX-License-Identifier: MIT
// Retries and dead letters: a failing handler is retried up to max_retries, then
// dead-lettered with its error, the previous one and the reason; a PermanentError dead-letters at
// once; extra fields ride along; retries log at debug, dead letters at warning. A retry waits out
// its backoff in the delayed set (the curve, full jitter, a handler's RetryAfter, a per-type
// backoff), and bad backoff, forward and rate options are configuration errors.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
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

TEST_F(ConsumerTest, FailingHandlerIsRetriedThenDeadLettered) {
  auto p = producer();
  const std::string id = p.enqueue("flaky", R"({"x":1})", {.max_retries = 2});
  std::atomic<int> calls{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      EXPECT_EQ(t.retry_count(), calls.load());
      ++calls;
      throw std::runtime_error("smtp down #" + std::to_string(calls.load()));
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && xlen(stream) == 0 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(calls, 3);  // first attempt + 2 retries
  const auto e = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(e, "task_id"), id);
  EXPECT_EQ(Client::get(e, "payload"), R"({"x":1})");
  EXPECT_EQ(Client::get(e, "retry_count"), "2");
  EXPECT_EQ(Client::get(e, "error"), "smtp down #3");
  EXPECT_EQ(Client::get(e, "last_error"), "smtp down #2");
  EXPECT_EQ(Client::get(e, "reason"), "retries_exhausted");
  EXPECT_EQ(Client::get(e, "consumer"), rc.consumer().name());
  EXPECT_FALSE(Client::get(e, "original_id").empty());
  EXPECT_FALSE(Client::get(e, "failed_at").empty());
  EXPECT_EQ(rc.consumer().metrics().retried, 2u);
  EXPECT_EQ(rc.consumer().metrics().dead_lettered, 1u);
}

TEST_F(ConsumerTest, PermanentErrorDeadLettersAtOnce) {
  producer().enqueue("charge", "{}");
  std::atomic<int> calls{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("charge", [&](const Task&) {
      ++calls;
      throw PermanentError("card declined");
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(calls, 1);
  const auto e = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(e, "reason"), "permanent");
  EXPECT_EQ(Client::get(e, "error"), "card declined");
}

TEST_F(ConsumerTest, ExtraFieldsRideIntoRetryCopiesAndDeadLetters) {
  const std::string id = producer().enqueue(
      "flaky", R"({"x":1})", {.max_retries = 1, .extra_fields = {{"priority", "high"}, {"tenant", "acme"}}});
  std::mutex m;
  std::vector<std::pair<std::string, std::string>> seen;  // priority, tenant per attempt
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      {
        std::lock_guard lock(m);
        seen.emplace_back(std::string(t.field("priority").value_or("")),
                          std::string(t.field("tenant").value_or("")));
      }
      throw std::runtime_error("attempt " + std::to_string(t.retry_count()));
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0 && xlen(stream) == 0; }));
  rc.stop();
  ASSERT_EQ(seen.size(), 2u);  // first attempt and the retry copy
  for (const auto& [priority, tenant] : seen) {
    EXPECT_EQ(priority, "high");
    EXPECT_EQ(tenant, "acme");
  }
  const auto dead = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(dead, "task_id"), id);
  EXPECT_EQ(Client::get(dead, "priority"), "high");
  EXPECT_EQ(Client::get(dead, "tenant"), "acme");
  EXPECT_EQ(Client::get(dead, "last_error"), "attempt 0");
  EXPECT_EQ(Client::get(dead, "error"), "attempt 1");
}

TEST_F(ConsumerTest, RetriesLogAtDebugAndDeadLettersAtWarning) {
  LogCapture log(LogLevel::debug);
  auto p = producer();
  for (int i = 0; i < 20; ++i) p.enqueue("flaky", "{}", {.max_retries = 1});
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task&) { throw std::runtime_error("backend down"); });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 20 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(log.count(LogLevel::debug, "failed, retry 1 of 1: backend down"), 20u);
  EXPECT_EQ(log.count(LogLevel::info, "failed, retry"), 0u);
  EXPECT_EQ(log.count(LogLevel::warning, "(retries_exhausted): backend down"), 20u);
}

// The retry copy waits in the delayed set, due within the jitter bound of the curve, and
// keeps last_error; the failed entry is gone from the stream in the same step.
TEST_F(SchedulingTest, AFailedAttemptIsRetriedAfterItsBackoff) {
  ConsumerOptions o = options();
  o.retry_backoff = {.base = 20s, .cap = 1h, .factor = 3.0, .jitter = false};
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}");
  std::atomic<int> attempts{0};
  const std::int64_t before = server_ms();
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("t", [&](const Task&) {
      ++attempts;
      throw std::runtime_error("CDN said 503");
    });
  });
  ASSERT_TRUE(wait_until([&] { return zcard() == 1; }));
  const std::int64_t after = server_ms();
  EXPECT_EQ(attempts.load(), 1);
  EXPECT_EQ(xlen(stream), 0);
  const auto due = due_times();
  EXPECT_GE(due[0], before + 20000);  // retry 1 of a 20 s base: exactly 20 s without jitter
  EXPECT_LE(due[0], after + 20000);
  const detail::Reply r = client.cmd({"ZRANGE", delayed, "0", "0"});
  const std::string member(r.view().check()[0].str());
  auto fields = member_fields(member);
  EXPECT_EQ(fields["last_error"], "CDN said 503");
  EXPECT_EQ(fields["retry_count"], "1");
  EXPECT_EQ(fields["task_id"], id);
  rc.stop();
  EXPECT_EQ(rc.consumer().metrics().retried, 1u);
}

// Full jitter: over many failures, every delay lies in [0, base * factor^n] and they spread.
TEST_F(SchedulingTest, JitteredRetriesStayWithinTheirBound) {
  constexpr int kTasks = 60;
  ConsumerOptions o = options();
  // Draws over an hour: one due before the consumer stopped would be moved back to the stream
  // (it happened at a base of 10 s: a loaded machine took long enough to stop).
  o.retry_backoff = {.base = 1h, .cap = 4h, .factor = 2.0, .jitter = true};
  Producer p = producer();
  for (int i = 0; i < kTasks; ++i) p.enqueue("t", "{}");
  const std::int64_t before = server_ms();
  RunningConsumer rc(o, [&](Consumer& c) { c.on("t", [](const Task&) { throw std::runtime_error("no"); }); });
  ASSERT_TRUE(wait_until([&] { return zcard() == kTasks; }));
  rc.stop();
  const std::int64_t after = server_ms();
  // A draw near 0 makes a task due at once: the forwarder moves it back, it fails again, and its
  // second delay is drawn from [0, 2 h]. So each member's bound follows its own retry count.
  const detail::Reply r = client.cmd({"ZRANGE", delayed, "0", "-1", "WITHSCORES"});
  const auto v = r.view().check();
  ASSERT_EQ(v.size(), 2u * kTasks);
  std::int64_t first_draw_min = INT64_MAX;
  std::int64_t first_draw_max = 0;
  for (std::size_t i = 0; i < v.size(); i += 2) {
    const int retries = std::stoi(member_fields(std::string(v[i].str()))["retry_count"]);
    const std::int64_t due = std::stoll(std::string(v[i + 1].str()));
    ASSERT_GE(retries, 1);
    EXPECT_GE(due, before);
    EXPECT_LE(due, after + (std::int64_t{3600000} << (retries - 1))) << "retry " << retries;
    if (retries == 1) {
      first_draw_min = std::min(first_draw_min, due);
      first_draw_max = std::max(first_draw_max, due);
    }
  }
  // About 60 uniform draws over an hour: all within six minutes of each other has probability ~0.
  EXPECT_GT(first_draw_max - first_draw_min, 360000);
}

// A handler's RetryAfter sets the delay, and counts as an attempt.
TEST_F(SchedulingTest, RetryAfterChoosesTheDelayAndCountsAsAnAttempt) {
  ConsumerOptions o = options();
  o.retry_backoff = {.base = 1h, .cap = 1h};
  Producer p = producer();
  p.enqueue("t", "{}", {.max_retries = 1});
  const std::int64_t before = server_ms();
  std::atomic<int> attempts{0};
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("t", [&](const Task&) {
      ++attempts;
      throw RetryAfter(1500ms, "rate limited by the far end");
    });
  });
  // (1.5 s in the delayed set: long enough for a loaded machine's test thread to see it there.)
  ASSERT_TRUE(wait_until([&] { return zcard() == 1; }));
  const std::vector<std::int64_t> due = due_times();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_GE(due[0], before + 1500);
  EXPECT_LE(due[0], server_ms() + 1500);
  // Its retry runs when due, fails the same way, and has no retries left.
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }));
  rc.stop();
  EXPECT_EQ(attempts.load(), 2);
  const auto entries = client.xrange(dlq);
  EXPECT_EQ(Client::get(entries[0].second, "reason"), "retries_exhausted");
  EXPECT_EQ(Client::get(entries[0].second, "error"), "rate limited by the far end");
  EXPECT_EQ(zcard(), 0);
}

// The per-type backoff of on() overrides the consumer's.
TEST_F(SchedulingTest, APerTypeBackoffOverridesTheConsumers) {
  ConsumerOptions o = options();
  o.retry_backoff = {.base = 1h, .cap = 1h, .jitter = false};
  Producer p = producer();
  p.enqueue("fast", "{}");
  const std::int64_t before = server_ms();
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("fast", [](const Task&) { throw std::runtime_error("no"); },
         {.retry_backoff = RetryBackoff{.base = 5s, .cap = 5s, .jitter = false}});
  });
  ASSERT_TRUE(wait_until([&] { return zcard() == 1; }));
  rc.stop();
  EXPECT_GE(due_times()[0], before + 5000);
  EXPECT_LT(due_times()[0], before + 60000);
}

TEST_F(SchedulingTest, BadBackoffAndRateOptionsAreConfigErrors) {
  auto with = [&](RetryBackoff b) {
    ConsumerOptions o = options();
    o.retry_backoff = b;
    return o;
  };
  EXPECT_THROW(Consumer(with({.base = -1ms})), ConfigError);
  EXPECT_THROW(Consumer(with({.base = 2s, .cap = 1s})), ConfigError);
  EXPECT_THROW(Consumer(with({.factor = 0.5})), ConfigError);
  ConsumerOptions o = options();
  o.forward_interval = 0ms;
  EXPECT_THROW(Consumer{o}, ConfigError);
  Consumer c(options());
  auto h = [](const Task&) {};
  EXPECT_THROW(c.on("a", h, {.rate = {.limit = -1}}), ConfigError);
  EXPECT_THROW(c.on("b", h, {.rate = {.limit = 5, .per = 0ms}}), ConfigError);
  EXPECT_THROW(c.on("c", h, {.retry_backoff = RetryBackoff{.factor = 0.0}}), ConfigError);
}

}  // namespace
}  // namespace streamq::test
