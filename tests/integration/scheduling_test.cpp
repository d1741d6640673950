// SPDX-License-Identifier: MIT
// Delayed tasks, retry backoff and rate limits: where a task waits (the delayed set), when it
// runs (never early, late by about forward_interval), that forwarding never loses or
// duplicates one, and that a rate limit holds across workers without failing a task.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;
using SystemClock = std::chrono::system_clock;

std::int64_t epoch_ms(SystemClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

class SchedulingTest : public ConsumerTest {
 protected:
  std::string delayed = stream + ":delayed";

  std::int64_t zcard() { return client.integer({"ZCARD", delayed}); }
  /// The server's clock in ms.
  std::int64_t server_ms() {
    const detail::Reply r = client.cmd({"TIME"});
    const auto v = r.view().check();
    return std::stoll(std::string(v[0].str())) * 1000 + std::stoll(std::string(v[1].str())) / 1000;
  }
  /// A delayed member's fields (lib/delayed.lua's format: a MessagePack array of strings, the
  /// tag, a nonce, the stream it goes to, then the fields), checked for that shape.
  static std::map<std::string, std::string> member_fields(const std::string& member) {
    const auto parts = nlohmann::json::from_msgpack(member);
    std::map<std::string, std::string> fields;
    EXPECT_TRUE(parts.is_array() && parts.size() >= 5 && parts.size() % 2 == 1) << parts.dump();
    if (!parts.is_array()) return fields;
    for (std::size_t i = 3; i + 1 < parts.size(); i += 2) fields[parts[i]] = parts[i + 1];
    return fields;
  }
  /// Scores of the delayed set, in order.
  std::vector<std::int64_t> due_times() {
    const detail::Reply r = client.cmd({"ZRANGE", delayed, "0", "-1", "WITHSCORES"});
    const auto v = r.view().check();
    std::vector<std::int64_t> out;
    for (std::size_t i = 1; i < v.size(); i += 2) out.push_back(std::stoll(std::string(v[i].str())));
    return out;
  }
};

TEST_F(SchedulingTest, DelayedTaskWaitsInTheDelayedSetWithItsBody) {
  Producer p = producer();
  const std::int64_t before = server_ms();
  const std::string id = p.enqueue("t", R"({"n":1})", {.delay = 60s});
  const std::int64_t after = server_ms();
  EXPECT_EQ(xlen(stream), 0);
  ASSERT_EQ(zcard(), 1);
  const auto due = due_times();
  EXPECT_GE(due[0], before + 60000);
  EXPECT_LE(due[0], after + 60000);
  // The member keeps the whole task (lib/delayed.lua's format: a MessagePack array of strings,
  // the tag, a nonce, the stream it goes to, then the fields).
  const detail::Reply r = client.cmd({"ZRANGE", delayed, "0", "0"});
  const std::string member(r.view().check()[0].str());
  const auto parts = nlohmann::json::from_msgpack(member);
  ASSERT_TRUE(parts.is_array()) << parts.dump();
  ASSERT_GE(parts.size(), 5u);
  EXPECT_EQ(parts[0], "sq1");
  EXPECT_EQ(parts[1].get<std::string>().size(), 36u);  // a UUID
  EXPECT_EQ(parts[2], stream);
  auto fields = member_fields(member);
  EXPECT_EQ(fields["task_id"], id);
  EXPECT_EQ(fields["task_type"], "t");
  EXPECT_EQ(fields["payload"], R"({"n":1})");
}

TEST_F(SchedulingTest, RunAtInThePastAndZeroDelayGoStraightToTheStream) {
  Producer p = producer();
  p.enqueue("t", "{}", {.run_at = SystemClock::now() - 1h});
  p.enqueue("t", "{}", {.delay = 0ms});
  EXPECT_EQ(xlen(stream), 2);
  EXPECT_EQ(zcard(), 0);
}

TEST_F(SchedulingTest, BadDelaysAreRefusedBeforeAnythingIsSent) {
  Producer p = producer();
  EXPECT_THROW(p.enqueue("t", "{}", {.delay = -1ms}), ConfigError);
  EXPECT_THROW(p.enqueue("t", "{}", {.delay = 1s, .run_at = SystemClock::now() + 1s}), ConfigError);
  EXPECT_THROW(p.enqueue_batch({{.task_type = "t", .payload = "{}"},
                                {.task_type = "t", .payload = "{}", .options = {.delay = -5ms}}}),
               ConfigError);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(zcard(), 0);
}

TEST_F(SchedulingTest, TheGateCountsDelayedTasks) {
  Producer p({.connection = {.url = server.url()}, .stream = stream, .max_len = 3});
  p.enqueue("t", "{}", {.delay = 1h});
  p.enqueue("t", "{}", {.delay = 1h});
  p.enqueue("t", "{}");
  EXPECT_THROW(p.enqueue("t", "{}", {.delay = 1h}), QueueFullError);
  EXPECT_THROW(p.enqueue("t", "{}"), QueueFullError);
  EXPECT_EQ(zcard() + xlen(stream), 3);
}

TEST_F(SchedulingTest, StatsReportDelayedTasksAndTheNextDueTime) {
  Producer p = producer();
  StatsReader stats({.connection = {.url = server.url()}, .stream = stream});
  EXPECT_FALSE(stats.read().next_delayed_due_ms.has_value());
  const std::int64_t before = server_ms();
  p.enqueue("t", "{}", {.delay = 30s});
  p.enqueue("t", "{}", {.delay = 10s});
  const QueueStats st = stats.read();
  EXPECT_EQ(st.delayed, 2);
  ASSERT_TRUE(st.next_delayed_due_ms.has_value());
  EXPECT_EQ(*st.next_delayed_due_ms, due_times()[0]);
  EXPECT_GE(*st.next_delayed_due_ms, before + 10000);
  ASSERT_TRUE(st.next_delayed_due_in_ms.has_value());
  EXPECT_GT(*st.next_delayed_due_in_ms, 9000);
  EXPECT_LE(*st.next_delayed_due_in_ms, 10000);
  EXPECT_NE(st.to_json().find("\"next_delayed_due_ms\""), std::string::npos);
  EXPECT_NE(st.to_prometheus().find("streamq_delayed_next_due_seconds{"), std::string::npos);
}

// Due-time precision: every task starts at or after its due time (same host, same clock),
// and the lateness is reported. Nothing runs twice.
TEST_F(SchedulingTest, DelayedTasksRunOnceNeverEarlyAndSoonAfterTheirDueTime) {
  constexpr int kTasks = 200;
  Producer p = producer();
  std::map<std::string, std::int64_t> due;  // task id -> due, ms since the epoch
  const auto start = SystemClock::now() + 500ms;
  for (int i = 0; i < kTasks; ++i) {
    const auto at = start + std::chrono::milliseconds(i * 7);  // spread over ~1.4 s
    due[p.enqueue("t", "{}", {.run_at = at})] = epoch_ms(at);
  }
  std::mutex m;
  std::map<std::string, int> runs;
  std::vector<std::int64_t> lateness;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("t", [&](const Task& t) {
      const std::int64_t now = epoch_ms(SystemClock::now());
      std::lock_guard lock(m);
      ++runs[t.id()];
      lateness.push_back(now - due.at(t.id()));
    });
  });
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard lock(m);
        return lateness.size() >= kTasks;
      },
      20s));
  rc.stop();
  std::lock_guard lock(m);
  ASSERT_EQ(runs.size(), static_cast<std::size_t>(kTasks));
  for (const auto& [id, n] : runs) EXPECT_EQ(n, 1) << id;
  std::sort(lateness.begin(), lateness.end());
  EXPECT_GE(lateness.front(), 0) << "a task ran before its due time";
  const std::int64_t p50 = lateness[lateness.size() / 2];
  const std::int64_t p99 = lateness[lateness.size() * 99 / 100];
  std::printf(
      "[ lateness ] %d delayed tasks, forward_interval 50 ms: p50 %lld ms, p99 %lld ms, max %lld ms\n",
      kTasks, static_cast<long long>(p50), static_cast<long long>(p99),
      static_cast<long long>(lateness.back()));
  EXPECT_EQ(zcard(), 0);
  EXPECT_EQ(xlen(dlq), 0);
}

// Many forwarders at once, on one delayed set: each task reaches the stream exactly once.
TEST_F(SchedulingTest, ManyForwardersMoveEachTaskOnce) {
  constexpr int kTasks = 3000;
  constexpr int kConsumers = 5;
  Producer p = producer();
  const auto at = SystemClock::now() + 1500ms;
  std::vector<TaskSpec> batch;
  for (int i = 0; i < kTasks; ++i)
    batch.push_back({.task_type = "t", .payload = "{}", .options = {.run_at = at}});
  const std::vector<std::string> ids = p.enqueue_batch(batch);
  ASSERT_EQ(zcard(), kTasks);
  std::mutex m;
  std::map<std::string, int> runs;
  std::atomic<int> total{0};
  std::vector<std::unique_ptr<RunningConsumer>> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    ConsumerOptions o = options();
    o.consumer_name = "w" + std::to_string(c);
    consumers.push_back(std::make_unique<RunningConsumer>(o, [&](Consumer& consumer) {
      consumer.on("t", [&](const Task& t) {
        std::lock_guard lock(m);
        ++runs[t.id()];
        ++total;
      });
    }));
  }
  ASSERT_TRUE(wait_until([&] { return total.load() >= kTasks; }, 30s)) << total.load();
  // Anything forwarded twice would show up now.
  std::uint64_t forwarded = 0;
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }));
  for (auto& c : consumers) {
    forwarded += c->consumer().metrics().forwarded;
    c->stop();
  }
  EXPECT_EQ(forwarded, static_cast<std::uint64_t>(kTasks));
  EXPECT_EQ(total.load(), kTasks);
  ASSERT_EQ(runs.size(), static_cast<std::size_t>(kTasks));
  for (const std::string& id : ids) EXPECT_EQ(runs[id], 1) << id;
  EXPECT_EQ(zcard(), 0);
}

TEST_F(SchedulingTest, AMemberNotInStreamqsFormatIsDeadLetteredNotDropped) {
  client.cmd({"ZADD", delayed, "1", R"({"task":"send_reminder","user":123})"}).view().check();
  // MessagePack, and tagged, but not a task: no fields (not an XADD either, and it must not
  // stall the set), a field value that is not a string, bytes after the array.
  auto packed = [&](const std::string& lua) {
    return std::string(
        client.cmd({"EVAL", "return cmsgpack.pack(" + lua + ")", "1", stream}).view().check().str());
  };
  const std::vector<std::string> malformed{R"({"task":"send_reminder","user":123})",
                                           packed("{'sq1', 'x', KEYS[1]}"),
                                           packed("{'sq1', 'x', KEYS[1], 'task_id', true}"),
                                           packed("{'sq1', 'x', KEYS[1], 'task_id', 'a'}") + "!"};
  for (std::size_t i = 1; i < malformed.size(); ++i) {
    client.cmd({"ZADD", delayed, std::to_string(i + 1), malformed[i]}).view().check();
  }
  Producer p = producer();
  p.enqueue("t", "{}", {.delay = 300ms});  // due after them, in the same set
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("t", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 4 && ran.load() == 1; }));
  rc.stop();
  const auto entries = client.xrange(dlq);
  ASSERT_EQ(entries.size(), malformed.size());
  for (std::size_t i = 0; i < malformed.size(); ++i) {
    EXPECT_EQ(Client::get(entries[i].second, "reason"), "malformed");
    EXPECT_EQ(Client::get(entries[i].second, "member"), malformed[i]);
  }
  EXPECT_EQ(zcard(), 0);
  EXPECT_EQ(ran.load(), 1);  // the task due after them was forwarded and ran
}

TEST_F(SchedulingTest, AWriteThatFailsStopsTheForwardPassAndNothingIsForwardedTwice) {
  // 20 tasks and a member that must be dead-lettered, all due at one moment (so a pass takes
  // them in the order of their bytes), while the dead-letter stream's key holds a string: the
  // pass fails at the member. The tasks ranked before it are forwarded, once; it and the rest
  // go back into the set, through every failing pass after; once the key is fixed they follow.
  Producer p = producer();
  std::vector<TaskSpec> batch(20, TaskSpec{"t", "{}", {.run_at = SystemClock::now() + 300ms}});
  const std::vector<std::string> ids = p.enqueue_batch(batch);
  const std::int64_t score = due_times()[0];
  // The start of a member in the format (an array of 15, the tag, a 36-byte nonce) cut off in
  // the nonce: it ranks among the tasks by the nonce's first character.
  const std::string cut = std::string("\x9f\xa3sq1\xd9\x24") + "8";
  client.cmd({"ZADD", delayed, std::to_string(score), cut}).view().check();
  ASSERT_EQ(due_times(), std::vector<std::int64_t>(21, score));
  const std::int64_t before = client.integer({"ZRANK", delayed, cut});
  client.cmd({"SET", dlq, "not a stream"}).view().check();
  ASSERT_TRUE(wait_until([&] { return server_ms() > score; }));  // all due before the first pass
  std::mutex m;
  std::map<std::string, int> runs;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("t", [&](const Task& t) {
      std::lock_guard lock(m);
      ++runs[t.id()];
    });
  });
  auto ran = [&] {
    std::lock_guard lock(m);
    return static_cast<std::int64_t>(runs.size());
  };
  ASSERT_TRUE(wait_until([&] { return ran() == before; }));
  // Each failing pass answers WRONGTYPE (the dead-letter write to the string): wait for two more.
  const auto wrongtype = [&] {
    const std::string info(client.cmd({"INFO", "errorstats"}).view().check().str());
    const auto at = info.find("errorstat_WRONGTYPE:count=");
    return at == std::string::npos ? 0 : std::stoll(info.substr(at + 26));
  };
  const std::int64_t failed_passes = wrongtype();
  ASSERT_TRUE(wait_until([&] { return wrongtype() >= failed_passes + 2; })) << "more failing passes";
  EXPECT_EQ(rc.consumer().metrics().forwarded, static_cast<std::uint64_t>(before));
  EXPECT_EQ(ran(), before);
  EXPECT_EQ(zcard(), 21 - before);
  EXPECT_EQ(client.integer({"ZRANK", delayed, cut}), 0);  // back, with its due time
  client.cmd({"DEL", dlq}).view().check();
  ASSERT_TRUE(wait_until([&] { return ran() == 20 && xlen(dlq) == 1; }));
  rc.stop();
  for (const std::string& id : ids) EXPECT_EQ(runs[id], 1) << id;
  EXPECT_EQ(zcard(), 0);
  EXPECT_EQ(Client::get(client.xrange(dlq)[0].second, "member"), cut);
  EXPECT_EQ(rc.consumer().metrics().forwarded, 21u);  // 20 tasks and the dead-lettered member
  std::printf("the first pass moved %lld tasks, then failed at the member\n", static_cast<long long>(before));
}

TEST_F(SchedulingTest, ATaskWithMoreFieldsThanAnEntryMayHaveIsRefused) {
  Producer p = producer();
  EnqueueOptions o{.delay = 1h};
  for (int i = 0; i < 1000; ++i) o.extra_fields.emplace_back("x" + std::to_string(i), "v");
  EXPECT_THROW(p.enqueue("t", "{}", o), ConfigError);
  o.extra_fields.resize(989);  // 9 standard fields at most besides them, 2 more on a retry
  p.enqueue("t", "{}", o);
  EXPECT_EQ(zcard(), 1);
}

// --- retry backoff -------------------------------------------------------------------------

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
  o.retry_backoff = {.base = 10s, .cap = 1h, .factor = 2.0, .jitter = true};
  Producer p = producer();
  for (int i = 0; i < kTasks; ++i) p.enqueue("t", "{}");
  const std::int64_t before = server_ms();
  RunningConsumer rc(o, [&](Consumer& c) { c.on("t", [](const Task&) { throw std::runtime_error("no"); }); });
  ASSERT_TRUE(wait_until([&] { return zcard() == kTasks; }));
  rc.stop();
  const std::int64_t after = server_ms();
  // A draw near 0 makes a task due at once: the forwarder moves it back, it fails again, and its
  // second delay is drawn from [0, 20 s]. So each member's bound follows its own retry count.
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
    EXPECT_LE(due, after + (std::int64_t{10000} << (retries - 1))) << "retry " << retries;
    if (retries == 1) {
      first_draw_min = std::min(first_draw_min, due);
      first_draw_max = std::max(first_draw_max, due);
    }
  }
  // About 60 uniform draws over 10 s: all within one second of each other has probability ~0.
  EXPECT_GT(first_draw_max - first_draw_min, 1000);
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
      throw RetryAfter(400ms, "rate limited by the far end");
    });
  });
  ASSERT_TRUE(wait_until([&] { return zcard() == 1; }));
  EXPECT_GE(due_times()[0], before + 400);
  EXPECT_LE(due_times()[0], server_ms() + 400);
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

// --- rate limits ---------------------------------------------------------------------------

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

}  // namespace
}  // namespace streamq::test
