// SPDX-License-Identifier: MIT
// Delayed tasks: where a task waits (the delayed set, with its whole body), what is refused
// before anything is sent, how the queue's gate and Stats count it, that it runs once, never early
// and soon after its due time, that many forwarders move each task once, and that a member not in
// streamq's format or a failing write neither loses nor duplicates a task.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "running_consumer.hpp"
#include "scheduling_fixture.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;
using SystemClock = std::chrono::system_clock;

std::int64_t epoch_ms(SystemClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

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
    c->stop();  // joins the forwarder, which counts a move after its script answered
    forwarded += c->consumer().metrics().forwarded;
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
  o.extra_fields.resize(
      985);  // 13 standard fields at most besides them (a flow's 3, a batch's), 2 more on a retry
  p.enqueue("t", "{}", o);
  EXPECT_EQ(zcard(), 1);
}

}  // namespace
}  // namespace streamq::test
