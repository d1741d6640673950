// SPDX-License-Identifier: MIT
// Periodic tasks (the Scheduler, cron and interval schedules) against a private redis-server:
// instances enqueue each tick once, a restart enqueues or skips the ticks it missed, a full
// queue refuses a tick loudly and once, a tick due while Redis is down is enqueued when it comes
// back, a consumer runs the ticks, and stop() is prompt. A fake clock drives them (but for the
// test of the default, the server's clock): the clock is moved, and the tests wait (with a
// deadline) for what Redis and the metrics show.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "log_capture.hpp"
#include "redis_server.hpp"
#include "scheduler/cron.hpp"
#include "scheduler_fixture.hpp"
#include "utc_time.hpp"
#include "wire/codec.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono;

TEST_F(SchedulerTest, ThreeInstancesEnqueueEachOfTenTicksOnce) {
  std::vector<std::unique_ptr<Scheduler>> schedulers;
  for (int i = 0; i < 3; ++i) schedulers.push_back(every_minute());
  for (auto& s : schedulers) s->start();
  // First start, 30 s after the last tick (past the 10 s grace): recorded, not enqueued.
  ASSERT_TRUE(wait_until([&] {
    const SchedulerMetrics m = sum(schedulers);
    return m.skipped + m.taken == 3;
  }));
  EXPECT_EQ(sum(schedulers).skipped, 1u);
  EXPECT_EQ(client.integer({"XLEN", stream}), 0);

  std::vector<std::string> expected;
  for (int i = 1; i <= 10; ++i) {
    clock.set(at(2026, 1, 1, 0, i, 2));
    expected.push_back("tick@" + detail::format_tick(at(2026, 1, 1, 0, i)));
    // Every instance has handled the tick: one enqueued it, the others found it taken.
    ASSERT_TRUE(wait_until([&] {
      const SchedulerMetrics m = sum(schedulers);
      return m.enqueued == static_cast<std::uint64_t>(i) && m.taken == 2 + 2 * static_cast<std::uint64_t>(i);
    })) << "tick "
        << i << ": enqueued " << sum(schedulers).enqueued << ", taken " << sum(schedulers).taken << ", XLEN "
        << client.integer({"XLEN", stream});
  }
  for (auto& s : schedulers) s->stop();
  EXPECT_EQ(client.integer({"XLEN", stream}), 10);
  EXPECT_EQ(task_ids(), expected);
  EXPECT_EQ(sum(schedulers).errors, 0u);
  EXPECT_EQ(record("tick", "tick"), ms(at(2026, 1, 1, 0, 10)));
  EXPECT_EQ(record("tick", "outcome"), "enqueued");
  const auto entries = client.xrange(stream);
  EXPECT_EQ(Client::get(entries[0].second, "task_type"), "report");
  EXPECT_EQ(nlohmann::json::parse(Client::get(entries[0].second, "payload")),
            (nlohmann::json{{"kind", "minutely"}}));
  EXPECT_EQ(Client::get(entries[0].second, "created_at"), "2026-01-01T00:01:02.000000");
  EXPECT_EQ(Client::get(entries[0].second, "max_retries"), "3");
  EXPECT_EQ(Client::get(entries[0].second, "retry_count"), "0");
}

TEST_F(SchedulerTest, RestartEnqueuesTheMostRecentMissedTickOnce) {
  clock.set(at(2026, 1, 1, 0, 1, 1));
  {
    auto s = every_minute(MissedTicks::enqueue_once);
    s->start();
    ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));  // 00:01, on time
  }
  // Every instance down from 00:01:01 to 00:07:30: ticks 00:02 ... 00:07 were missed.
  clock.set(at(2026, 1, 1, 0, 7, 30));
  auto s = every_minute(MissedTicks::enqueue_once);
  s->start();
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  EXPECT_EQ(task_ids(), (std::vector<std::string>{"tick@2026-01-01T00:01:00Z", "tick@2026-01-01T00:07:00Z"}));
  clock.set(at(2026, 1, 1, 0, 8, 1));
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 2; }));
  s->stop();
  EXPECT_EQ(task_ids().size(), 3u);
  EXPECT_EQ(task_ids().back(), "tick@2026-01-01T00:08:00Z");
  EXPECT_EQ(s->metrics().skipped, 0u);
}

TEST_F(SchedulerTest, RestartWithSkipRecordsTheMissedTickWithoutEnqueuingIt) {
  clock.set(at(2026, 1, 1, 0, 1, 1));
  {
    auto s = every_minute(MissedTicks::skip);
    s->start();
    ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  }
  clock.set(at(2026, 1, 1, 0, 7, 30));
  auto s = every_minute(MissedTicks::skip);
  s->start();
  ASSERT_TRUE(wait_until([&] { return s->metrics().skipped == 1; }));
  EXPECT_EQ(task_ids(), (std::vector<std::string>{"tick@2026-01-01T00:01:00Z"}));
  EXPECT_EQ(record("tick", "tick"), ms(at(2026, 1, 1, 0, 7)));
  EXPECT_EQ(record("tick", "outcome"), "skipped");
  clock.set(at(2026, 1, 1, 0, 8, 1));  // the next tick is on time again
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  s->stop();
  EXPECT_EQ(task_ids(), (std::vector<std::string>{"tick@2026-01-01T00:01:00Z", "tick@2026-01-01T00:08:00Z"}));
}

TEST_F(SchedulerTest, RestartWithinTheSameTickEnqueuesNothingTwice) {
  clock.set(at(2026, 1, 1, 0, 1, 1));
  for (int run = 0; run < 3; ++run) {
    auto s = every_minute();
    s->start();
    ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued + s->metrics().taken == 1; }));
    EXPECT_EQ(s->metrics().enqueued, run == 0 ? 1u : 0u);
  }
  EXPECT_EQ(task_ids(), (std::vector<std::string>{"tick@2026-01-01T00:01:00Z"}));
}

TEST_F(SchedulerTest, IntervalScheduleTicksAtMultiplesOfItsInterval) {
  clock.set(at(2026, 1, 1, 0, 0, 1));  // 1 s after the 00:00:00 tick: on time, enqueued at start
  Scheduler s(options());
  s.add("half-minute", Schedule::every(seconds(30)), "ping", "{}", {.max_retries = 0});
  s.start();
  ASSERT_TRUE(wait_until([&] { return s.metrics().enqueued == 1; }));
  clock.set(at(2026, 1, 1, 0, 0, 29));  // no tick yet
  clock.set(at(2026, 1, 1, 0, 0, 31));
  ASSERT_TRUE(wait_until([&] { return s.metrics().enqueued == 2; }));
  clock.set(at(2026, 1, 1, 0, 1, 0));
  ASSERT_TRUE(wait_until([&] { return s.metrics().enqueued == 3; }));
  s.stop();
  EXPECT_EQ(task_ids(),
            (std::vector<std::string>{"half-minute@2026-01-01T00:00:00Z", "half-minute@2026-01-01T00:00:30Z",
                                      "half-minute@2026-01-01T00:01:00Z"}));
  EXPECT_EQ(Client::get(client.xrange(stream)[0].second, "max_retries"), "0");
}

TEST_F(SchedulerTest, AFullQueueRefusesTheTickLoudlyAndOnlyOnce) {
  LogCapture log(LogLevel::info);
  clock.set(at(2026, 1, 1, 0, 1, 1));
  SchedulerOptions o = options();
  o.queue.max_len = 2;
  std::vector<std::unique_ptr<Scheduler>> schedulers;
  for (int i = 0; i < 2; ++i) {
    schedulers.push_back(std::make_unique<Scheduler>(o));
    schedulers.back()->add("tick", Schedule::cron("* * * * *"), "report", "{}");
    schedulers.back()->start();
  }
  for (int i = 2; i <= 3; ++i) {
    ASSERT_TRUE(wait_until([&] { return sum(schedulers).enqueued == static_cast<std::uint64_t>(i - 1); }));
    ASSERT_TRUE(wait_until([&] { return sum(schedulers).taken == static_cast<std::uint64_t>(i - 1); }));
    clock.set(at(2026, 1, 1, 0, i, 1));
  }
  // 00:03 finds two unfinished tasks: refused by one instance, taken by the other.
  ASSERT_TRUE(wait_until([&] { return sum(schedulers).refused == 1 && sum(schedulers).taken == 3; }));
  EXPECT_EQ(client.integer({"XLEN", stream}), 2);
  EXPECT_EQ(record("tick", "outcome"), "refused");
  EXPECT_EQ(record("tick", "task_id"), "tick@2026-01-01T00:03:00Z");
  // Room again: the next tick is enqueued.
  client.cmd({"XTRIM", stream, "MAXLEN", "0"});
  clock.set(at(2026, 1, 1, 0, 4, 1));
  ASSERT_TRUE(wait_until([&] { return sum(schedulers).enqueued == 3; }));
  for (auto& s : schedulers) s->stop();
  EXPECT_EQ(task_ids(), (std::vector<std::string>{"tick@2026-01-01T00:04:00Z"}));
  // (Read after stop(): the refusal is counted before it is logged.)
  EXPECT_EQ(log.count(LogLevel::error, "queue full"), 1u);
  EXPECT_EQ(log.count(LogLevel::error, "tick@2026-01-01T00:03:00Z"), 1u);
}

TEST_F(SchedulerTest, ATickDueWhileRedisIsDownIsEnqueuedWhenItComesBack) {
  clock.set(at(2026, 1, 1, 0, 1, 1));
  auto s = every_minute();
  s->start();
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  server.kill9();
  clock.set(at(2026, 1, 1, 0, 2, 1));  // due while Redis is unreachable
  ASSERT_TRUE(wait_until([&] { return s->metrics().errors > 0; }));
  server.restart();  // on its AOF: the 00:01 task and the record are still there
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 2; }));
  s->stop();
  EXPECT_GE(s->metrics().reconnects, 1u);
  Client after(server.url());
  std::vector<std::string> ids;
  for (const auto& [id, fields] : after.xrange(stream)) ids.push_back(Client::get(fields, "task_id"));
  EXPECT_EQ(ids, (std::vector<std::string>{"tick@2026-01-01T00:01:00Z", "tick@2026-01-01T00:02:00Z"}));
}

TEST_F(SchedulerTest, AConsumerRunsTheScheduledTasks) {
  clock.set(at(2026, 1, 1, 0, 1, 1));
  std::mutex m;
  std::vector<std::string> ran;
  Consumer consumer({.connection = {.url = server.url()}, .stream = stream, .block = milliseconds(100)});
  consumer.on("report", [&](const Task& task) {
    std::lock_guard lock(m);
    ran.push_back(task.id() + " " + task.json().at("kind").get<std::string>());
  });
  std::thread worker([&] { consumer.run(); });
  auto s = every_minute();
  s->start();
  clock.set(at(2026, 1, 1, 0, 1, 1));
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  clock.set(at(2026, 1, 1, 0, 2, 1));
  const bool done = wait_until([&] {
    std::lock_guard lock(m);
    return ran.size() == 2;
  });
  s->stop();
  consumer.stop();
  worker.join();
  ASSERT_TRUE(done);
  std::sort(ran.begin(), ran.end());  // four handler threads: either may finish first
  EXPECT_EQ(ran, (std::vector<std::string>{"tick@2026-01-01T00:01:00Z minutely",
                                           "tick@2026-01-01T00:02:00Z minutely"}));
}

TEST_F(SchedulerTest, TheDefaultClockIsTheServers) {
  // No injected clock: a 1 s interval schedule ticks on the server's time.
  SchedulerOptions o = options();
  o.clock = {};
  Scheduler s(o);
  s.add("second", Schedule::every(seconds(1)), "ping", "{}");
  s.start();
  ASSERT_TRUE(wait_until([&] { return s.metrics().enqueued >= 2; }));
  s.stop();
  const detail::Reply time = client.cmd({"TIME"});
  const TimePoint server_now(seconds(time.view()[0].as_int()));
  const std::string last = task_ids().back();
  const auto tick = detail::parse_timestamp(last.substr(last.find('@') + 1));
  ASSERT_TRUE(tick.has_value()) << last;
  EXPECT_LE(*tick, server_now + seconds(1));
  EXPECT_GE(*tick, server_now - seconds(30));
}

TEST_F(SchedulerTest, StopIsPromptEvenWithALongWait) {
  // Waits are up to an hour here: a stop() that did not wake the wait would hang this test.
  SchedulerOptions o = options();
  o.max_wait = hours(1);
  Scheduler s(o);
  s.add("yearly", Schedule::cron("@yearly"), "report", "{}");
  s.start();
  ASSERT_TRUE(wait_until([&] { return s.metrics().skipped == 1; }));  // first start, long past
  s.stop();
  EXPECT_EQ(client.integer({"XLEN", stream}), 0);
  EXPECT_EQ(record("yearly", "tick"), ms(at(2026, 1, 1)));
}

/// The ids of the tasks of schedule `name`, in stream order.
std::vector<std::string> ids_of(const std::vector<std::string>& ids, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& id : ids) {
    if (id.rfind(name + "@", 0) == 0) out.push_back(id);
  }
  return out;
}

// Europe/Berlin through both nights of 2026 when its clock changes, the fake clock moved 5
// minutes at a time: the tasks enqueued are the ticks docs/scheduling.md#time-zones promises.
// A 5-minute interval schedule ("pulse", absolute: it ignores the zone) ticks at every step,
// so its task shows that the Scheduler has handled the step (the zoned schedules come first
// in each wake-up).
TEST_F(SchedulerTest, BerlinTimeAcrossBothDaylightSavingChanges) {
  struct Night {
    const char* name;
    TimePoint from;  // 2 s after a whole 5 minutes (UTC)
    TimePoint to;
    std::vector<std::string> hourly;
    std::vector<std::string> half_past_two;
  };
  const Night nights[] = {
      // 00:00 CET to 04:30 CEST: 02:00 does not exist; 02:30 runs at 03:00 CEST.
      {"spring",
       at(2026, 3, 28, 23, 0, 2),
       at(2026, 3, 29, 2, 30),
       {"2026-03-28T23:00:00Z", "2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"},
       {"2026-03-29T01:00:00Z"}},
      // 00:00 CEST to 03:30 CET: 02:00 comes twice (hourly: both); 02:30 once, in summer time.
      {"fall",
       at(2026, 10, 24, 22, 0, 2),
       at(2026, 10, 25, 2, 30),
       {"2026-10-24T22:00:00Z", "2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z",
        "2026-10-25T02:00:00Z"},
       {"2026-10-25T00:30:00Z"}},
  };
  for (const Night& night : nights) {
    SCOPED_TRACE(night.name);
    const std::string suffix = std::string("-") + night.name;
    clock.set(night.from);
    Scheduler s(options());
    s.add("hourly" + suffix, Schedule::cron("0 * * * *", "Europe/Berlin"), "report", "{}");
    s.add("half-past-two" + suffix, Schedule::cron("30 2 * * *", "Europe/Berlin"), "report", "{}");
    s.add("pulse" + suffix, Schedule::every(minutes(5)), "pulse", "{}");
    s.start();
    std::vector<std::string> pulses;
    for (TimePoint now = night.from; now <= night.to; now += minutes(5)) {
      clock.set(now);
      pulses.push_back("pulse" + suffix + "@" + detail::format_tick(now - seconds(2)));
      ASSERT_TRUE(wait_until([&] { return ids_of(task_ids(), "pulse" + suffix) == pulses; }))
          << "at " << detail::format_tick(now);
    }
    s.stop();
    std::vector<std::string> hourly;
    for (const std::string& tick : night.hourly) hourly.push_back("hourly" + suffix + "@" + tick);
    EXPECT_EQ(ids_of(task_ids(), "hourly" + suffix), hourly);
    std::vector<std::string> half_past_two;
    for (const std::string& tick : night.half_past_two)
      half_past_two.push_back("half-past-two" + suffix + "@" + tick);
    EXPECT_EQ(ids_of(task_ids(), "half-past-two" + suffix), half_past_two);
    EXPECT_EQ(s.metrics().errors, 0u);
    // The first start found 02:30 of the day before long past: recorded, not enqueued.
    EXPECT_EQ(s.metrics().skipped, 1u);
  }
}

}  // namespace
}  // namespace streamq::test
