// SPDX-License-Identifier: MIT
// Schedules as data (streamq::Schedules, docs/scheduling.md "Schedules as data") against a
// private redis-server: upsert, pause, resume, remove and the list with its next ticks;
// Schedulers that pick up a change without a restart; exactly one task per tick across an
// upsert that changes the expression under two racing Schedulers (also when a Scheduler missed
// the change counter), across a removal and a Redis restart. A fake clock drives the
// Schedulers and the Schedules (the time of a change), set separately where a test needs the
// change to land between two wake-ups.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "log_capture.hpp"
#include "scheduler/cron.hpp"
#include "scheduler_fixture.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono;

class SchedulesTest : public SchedulerTest {
 protected:
  /// The clock of the Schedules (the time of a change); the Schedulers' is `clock`.
  FakeClock change_clock{at(2026, 1, 1, 0, 0, 30)};
  Schedules schedules{QueueOptions{.connection = {.url = server.url()}, .stream = stream}, change_clock.fn()};

  std::unique_ptr<Scheduler> running(int max_wait_ms = 5) const {
    SchedulerOptions o = options();
    o.max_wait = milliseconds(max_wait_ms);
    auto s = std::make_unique<Scheduler>(o);
    s->start();
    return s;
  }
  static std::string id(const std::string& name, TimePoint t) { return name + "@" + detail::format_tick(t); }
  /// Waits until every instance read the stored schedules again after `before` (their reloads).
  static bool all_reloaded(const std::vector<std::unique_ptr<Scheduler>>& fleet,
                           const std::vector<std::uint64_t>& before) {
    return wait_until(
        [&] {
          for (std::size_t i = 0; i < fleet.size(); ++i) {
            if (fleet[i]->metrics().reloads <= before[i]) return false;
          }
          return true;
        },
        seconds(5));
  }
  static std::vector<std::uint64_t> reloads(const std::vector<std::unique_ptr<Scheduler>>& fleet) {
    std::vector<std::uint64_t> r;
    for (const auto& s : fleet) r.push_back(s->metrics().reloads);
    return r;
  }
};

TEST_F(SchedulesTest, UpsertPauseResumeAndRemoveAreWhatTheListShows) {
  const Schedule berlin = Schedule::cron("0 9 * * mon-fri", "Europe/Berlin");
  EXPECT_EQ(schedules.upsert("report", berlin, "generate_pdf", {{"kind", "sales"}}), UpsertOutcome::created);
  EXPECT_EQ(schedules.upsert("report", berlin, "generate_pdf", {{"kind", "sales"}}),
            UpsertOutcome::unchanged);
  EXPECT_EQ(schedules.upsert("beat", Schedule::every(seconds(30)), "ping", "{}",
                             {.max_retries = 1, .priority = Priority::high}),
            UpsertOutcome::created);

  std::vector<ScheduleInfo> list = schedules.list(2);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "beat");  // sorted by name
  EXPECT_EQ(list[0].schedule, "every 30000ms");
  EXPECT_EQ(list[0].options.max_retries, 1);
  EXPECT_EQ(list[0].options.priority, Priority::high);
  EXPECT_EQ(list[0].next_ticks, (std::vector<TimePoint>{at(2026, 1, 1, 0, 1, 0), at(2026, 1, 1, 0, 1, 30)}));
  const ScheduleInfo& report = list[1];
  EXPECT_EQ(report.schedule, "0 9 * * mon-fri Europe/Berlin");
  EXPECT_EQ(report.task_type, "generate_pdf");
  EXPECT_EQ(nlohmann::json::parse(report.payload), (nlohmann::json{{"kind", "sales"}}));
  EXPECT_FALSE(report.from_code);
  EXPECT_FALSE(report.paused);
  EXPECT_EQ(report.version, 1);
  // 2026-01-01 is a Thursday; 09:00 CET is 08:00 UTC.
  EXPECT_EQ(report.next_ticks, (std::vector<TimePoint>{at(2026, 1, 1, 8, 0), at(2026, 1, 2, 8, 0)}));
  EXPECT_FALSE(report.last_tick.has_value());

  EXPECT_EQ(schedules.upsert("report", Schedule::cron("0 10 * * mon-fri", "Europe/Berlin"), "generate_pdf",
                             {{"kind", "sales"}}),
            UpsertOutcome::changed);
  EXPECT_TRUE(schedules.pause("report", "holidays (ops)"));
  std::optional<ScheduleInfo> paused = schedules.get("report");
  ASSERT_TRUE(paused);
  EXPECT_EQ(paused->version, 2);
  EXPECT_TRUE(paused->paused);
  EXPECT_EQ(paused->note, "holidays (ops)");
  EXPECT_TRUE(paused->next_ticks.empty());
  // An upsert keeps it paused.
  EXPECT_EQ(schedules.upsert("report", Schedule::cron("0 11 * * mon-fri", "Europe/Berlin"), "generate_pdf",
                             {{"kind", "sales"}}),
            UpsertOutcome::changed);
  EXPECT_TRUE(schedules.get("report")->paused);
  EXPECT_TRUE(schedules.resume("report"));
  const ScheduleInfo resumed = *schedules.get("report", 1);
  EXPECT_FALSE(resumed.paused);
  EXPECT_EQ(resumed.note, "");
  EXPECT_EQ(resumed.next_ticks, (std::vector<TimePoint>{at(2026, 1, 1, 10, 0)}));

  EXPECT_TRUE(schedules.remove("report"));
  EXPECT_FALSE(schedules.get("report"));
  EXPECT_FALSE(schedules.remove("report"));
  EXPECT_FALSE(schedules.pause("report"));
  EXPECT_FALSE(schedules.resume("nothing"));
  ASSERT_EQ(schedules.list().size(), 1u);
  EXPECT_EQ(schedules.list()[0].name, "beat");

  const nlohmann::json j = nlohmann::json::parse(schedules.list()[0].to_json());
  EXPECT_EQ(j["name"], "beat");
  EXPECT_EQ(j["next_ticks"][0], "2026-01-01T00:01:00Z");
  EXPECT_EQ(j["options"]["priority"], "high");
}

TEST_F(SchedulesTest, BadDefinitionsAreRefusedNamingWhatIsWrong) {
  try {
    schedules.upsert("x", Schedule::cron("0 9 * * *", "Mars/Olympus_Mons"), "t", "{}");
    FAIL() << "an unknown zone was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Mars/Olympus_Mons"), std::string::npos) << e.what();
  }
  EXPECT_THROW(schedules.upsert("", Schedule::every(seconds(1)), "t", "{}"), ConfigError);
  EXPECT_THROW(schedules.upsert("x", Schedule::every(seconds(1)), "", "{}"), ConfigError);
  EXPECT_THROW(schedules.upsert("x", Schedule::every(seconds(1)), "t", "{}", {.limit = 0}), ConfigError);
  EXPECT_THROW(schedules.upsert("x", Schedule::every(seconds(1)), "t", "{}",
                                {.start = at(2026, 2, 1, 0, 0), .end = at(2026, 1, 1, 0, 0)}),
               ConfigError);
  EXPECT_THROW(
      schedules.upsert("x", Schedule::every(seconds(1)), "t", "{}", {.extra_fields = {{"task_id", "mine"}}}),
      ConfigError);
  EXPECT_THROW(schedules.upsert("x", Schedule::every(seconds(1)), "t", "{}",
                                {.catch_up = CatchUp::all_within(milliseconds(0))}),
               ConfigError);
  EXPECT_THROW(Scheduler({.queue = {.stream = "q"}, .missed = MissedTicks::all_within}), ConfigError);
  try {
    schedules.upsert("x", Schedule::every(seconds(30)), "t", "{}", {.jitter = seconds(30)});
    FAIL() << "a jitter of a whole interval was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("30000 ms"), std::string::npos) << e.what();
  }
  EXPECT_THROW(schedules.upsert("x", Schedule::cron("0,1 9 * * *"), "t", "{}", {.jitter = minutes(1)}),
               ConfigError);
  EXPECT_EQ(schedules.upsert("x", Schedule::every(seconds(30)), "t", "{}", {.jitter = seconds(29)}),
            UpsertOutcome::created);
  EXPECT_TRUE(schedules.remove("x"));
  EXPECT_TRUE(schedules.list().empty());
}

TEST_F(SchedulesTest, SchedulesGivenInCodeAreStoredAtStartAndSaySo) {
  clock.set(at(2026, 1, 1, 0, 1, 1));
  for (int run = 0; run < 2; ++run) {  // a restart stores the same definition: unchanged
    auto s = every_minute();
    s->start();
    ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued + s->metrics().taken == 1; }));
    s->stop();
  }
  const std::optional<ScheduleInfo> tick = schedules.get("tick");
  ASSERT_TRUE(tick);
  EXPECT_TRUE(tick->from_code);
  EXPECT_EQ(tick->version, 1);
  EXPECT_EQ(tick->schedule, "* * * * *");
  EXPECT_EQ(tick->last_tick, at(2026, 1, 1, 0, 1));
  EXPECT_EQ(tick->last_outcome, "enqueued");
  EXPECT_EQ(tick->last_task_id, id("tick", at(2026, 1, 1, 0, 1)));
  EXPECT_EQ(tick->enqueued, 1);
  EXPECT_EQ(task_ids(), (std::vector<std::string>{id("tick", at(2026, 1, 1, 0, 1))}));
}

TEST_F(SchedulesTest, AReconnectDoesNotUndoAnOperatorsChangeToAScheduleFromCode) {
  clock.set(at(2026, 1, 1, 0, 1, 1));
  auto s = every_minute();  // "tick", "* * * * *", from code
  s->start();
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  const std::uint64_t before_change = s->metrics().reloads;
  ASSERT_EQ(schedules.upsert("tick", Schedule::cron("*/5 * * * *"), "report", "{}"), UpsertOutcome::changed);
  ASSERT_TRUE(wait_until([&] { return s->metrics().reloads > before_change; }));  // it runs the operator's
  const std::uint64_t before_restart = s->metrics().reloads;
  server.kill9();
  server.restart();  // on its AOF: the operator's definition is there
  // The reconnect's wake-up stores what code has and the server does not, then reads them all.
  ASSERT_TRUE(wait_until([&] { return s->metrics().reloads > before_restart; }));
  EXPECT_GE(s->metrics().reconnects, 1u);
  s->stop();
  Schedules after(QueueOptions{.connection = {.url = server.url()}, .stream = stream}, change_clock.fn());
  const std::optional<ScheduleInfo> tick = after.get("tick");
  ASSERT_TRUE(tick);
  EXPECT_EQ(tick->schedule, "*/5 * * * *");
  EXPECT_FALSE(tick->from_code);
  // A new start of the program stores its own again: code is the schedule's source.
  auto again = every_minute();
  again->start();
  ASSERT_TRUE(wait_until([&] { return after.get("tick")->schedule == "* * * * *"; }));
  again->stop();
}

TEST_F(SchedulesTest, RunningSchedulersPickUpAnUpsertAPauseAndARemovalWithoutARestart) {
  // Real waits of a second between wake-ups, as by default: a change is seen at the next one.
  std::vector<std::unique_ptr<Scheduler>> fleet;
  fleet.push_back(running(1000));
  fleet.push_back(running(1000));
  ASSERT_EQ(schedules.upsert("later", Schedule::cron("* * * * *"), "report", "{}"), UpsertOutcome::created);
  clock.set(at(2026, 1, 1, 0, 1, 0) + milliseconds(500));
  ASSERT_TRUE(wait_until([&] { return sum(fleet).enqueued == 1; }, seconds(5)));
  EXPECT_EQ(task_ids(), (std::vector<std::string>{id("later", at(2026, 1, 1, 0, 1))}));

  std::vector<std::uint64_t> before = reloads(fleet);
  ASSERT_TRUE(schedules.pause("later", "maintenance"));
  ASSERT_TRUE(all_reloaded(fleet, before));  // within a wake-up (1 s) of the pause
  const std::uint64_t paused_at = sum(fleet).enqueued;
  clock.set(at(2026, 1, 1, 0, 2, 0) + milliseconds(500));
  std::this_thread::sleep_for(milliseconds(2500));  // two wake-ups: a tick would have been handled
  EXPECT_EQ(sum(fleet).enqueued, paused_at);
  EXPECT_EQ(schedules.get("later")->last_tick, at(2026, 1, 1, 0, 1));

  // Resumed: the 00:02 tick, missed while paused, is not caught up; 00:03 runs.
  change_clock.set(at(2026, 1, 1, 0, 2, 30));
  ASSERT_TRUE(schedules.resume("later"));
  clock.set(at(2026, 1, 1, 0, 3, 0) + milliseconds(500));
  ASSERT_TRUE(wait_until([&] { return sum(fleet).enqueued == paused_at + 1; }, seconds(5)));

  before = reloads(fleet);
  ASSERT_TRUE(schedules.remove("later"));
  ASSERT_TRUE(all_reloaded(fleet, before));
  clock.set(at(2026, 1, 1, 0, 4, 0) + milliseconds(500));
  std::this_thread::sleep_for(milliseconds(2500));
  for (auto& s : fleet) s->stop();
  EXPECT_EQ(task_ids(),
            (std::vector<std::string>{id("later", at(2026, 1, 1, 0, 1)), id("later", at(2026, 1, 1, 0, 3))}));
  EXPECT_EQ(sum(fleet).errors, 0u);
}

TEST_F(SchedulesTest, AChangedExpressionUnderTwoRacingSchedulersRunsEachTickOnceAndNoneIsLostAtTheSwitch) {
  // Even minutes, then odd minutes from 00:06:00.5 on: the 00:06 tick is the old definition's
  // (due before the switch, and not handled yet when it happened), 00:07 the new one's.
  ASSERT_EQ(schedules.upsert("s", Schedule::cron("*/2 * * * *"), "report", "{}"), UpsertOutcome::created);
  std::vector<std::unique_ptr<Scheduler>> fleet;
  fleet.push_back(running());
  fleet.push_back(running());
  for (const int minute : {2, 4}) {
    clock.set(at(2026, 1, 1, 0, minute, 1));
    ASSERT_TRUE(wait_until([&] { return schedules.get("s")->last_tick == at(2026, 1, 1, 0, minute); }));
  }
  clock.set(at(2026, 1, 1, 0, 5, 59));
  change_clock.set(at(2026, 1, 1, 0, 6, 0) + milliseconds(500));
  const std::vector<std::uint64_t> before = reloads(fleet);
  ASSERT_EQ(schedules.upsert("s", Schedule::cron("1-59/2 * * * *"), "report", "{}"), UpsertOutcome::changed);
  // Both instances read the change (at 00:05:59 on their clock) before time goes on.
  ASSERT_TRUE(all_reloaded(fleet, before));
  for (const int minute : {7, 8, 9, 10, 11}) {
    clock.set(at(2026, 1, 1, 0, minute, 1));
    const TimePoint due = at(2026, 1, 1, 0, minute % 2 == 1 ? minute : minute - 1);
    ASSERT_TRUE(wait_until([&] { return schedules.get("s")->last_tick == due; }));
  }
  for (auto& s : fleet) s->stop();
  EXPECT_EQ(task_ids(),
            (std::vector<std::string>{id("s", at(2026, 1, 1, 0, 2)), id("s", at(2026, 1, 1, 0, 4)),
                                      id("s", at(2026, 1, 1, 0, 6)), id("s", at(2026, 1, 1, 0, 7)),
                                      id("s", at(2026, 1, 1, 0, 9)), id("s", at(2026, 1, 1, 0, 11))}));
  EXPECT_EQ(sum(fleet).errors, 0u);
}

TEST_F(SchedulesTest, ASchedulerThatMissedTheChangeCounterIsToldByTheTickScriptAndEnqueuesNoOldTick) {
  // The change lands in the record, but its counter write is lost (a client killed between the
  // two): the instances still run the old definition until a tick of it is refused as stale.
  ASSERT_EQ(schedules.upsert("s", Schedule::cron("*/2 * * * *"), "report", "{}"), UpsertOutcome::created);
  std::vector<std::unique_ptr<Scheduler>> fleet;
  fleet.push_back(running());
  fleet.push_back(running());
  clock.set(at(2026, 1, 1, 0, 2, 1));
  ASSERT_TRUE(wait_until([&] { return sum(fleet).enqueued == 1; }));
  clock.set(at(2026, 1, 1, 0, 3, 0));
  change_clock.set(at(2026, 1, 1, 0, 3, 0));
  ASSERT_EQ(schedules.upsert("s", Schedule::cron("1-59/2 * * * *"), "report", "{}"), UpsertOutcome::changed);
  client.cmd({"HINCRBY", stream + ":schedules:changed", "n", "-1"});
  const std::vector<std::uint64_t> before = reloads(fleet);
  clock.set(at(2026, 1, 1, 0, 4, 1));  // the old definition's tick: refused, re-read
  ASSERT_TRUE(all_reloaded(fleet, before));
  clock.set(at(2026, 1, 1, 0, 5, 1));  // the new one's
  ASSERT_TRUE(wait_until([&] { return sum(fleet).enqueued == 2 && sum(fleet).taken >= 2; }));
  for (auto& s : fleet) s->stop();
  EXPECT_EQ(task_ids(),
            (std::vector<std::string>{id("s", at(2026, 1, 1, 0, 2)), id("s", at(2026, 1, 1, 0, 5))}));
}

TEST_F(SchedulesTest, StoredSchedulesAndTheirRecordsOutliveARedisRestart) {
  ASSERT_EQ(schedules.upsert("s", Schedule::cron("* * * * *"), "report", "{}"), UpsertOutcome::created);
  auto s = running();
  clock.set(at(2026, 1, 1, 0, 1, 1));
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  server.kill9();
  server.restart();  // on its AOF
  clock.set(at(2026, 1, 1, 0, 2, 1));
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 2; }));
  // A second instance started now, and the first again, find both ticks taken.
  auto late = running();
  ASSERT_TRUE(wait_until([&] { return late->metrics().taken == 1; }));
  s->stop();
  late->stop();
  Client after(server.url());
  std::vector<std::string> ids;
  for (const auto& [entry, fields] : after.xrange(stream)) ids.push_back(Client::get(fields, "task_id"));
  EXPECT_EQ(ids, (std::vector<std::string>{id("s", at(2026, 1, 1, 0, 1)), id("s", at(2026, 1, 1, 0, 2))}));
}

TEST_F(SchedulesTest, AScheduleRemovedAndAddedAgainDoesNotRunItsRecordedTickTwice) {
  ASSERT_EQ(schedules.upsert("s", Schedule::cron("* * * * *"), "report", "{}"), UpsertOutcome::created);
  auto s = running();
  clock.set(at(2026, 1, 1, 0, 1, 1));
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  ASSERT_TRUE(schedules.remove("s"));
  ASSERT_EQ(schedules.upsert("s", Schedule::cron("* * * * *"), "report", "{}"), UpsertOutcome::created);
  // A fresh instance asks for the 00:01 tick: the record, which stayed, says it was taken.
  auto fresh = running();
  ASSERT_TRUE(wait_until([&] { return fresh->metrics().taken == 1; }));
  clock.set(at(2026, 1, 1, 0, 2, 1));
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued + fresh->metrics().enqueued == 2; }));
  s->stop();
  fresh->stop();
  EXPECT_EQ(task_ids(),
            (std::vector<std::string>{id("s", at(2026, 1, 1, 0, 1)), id("s", at(2026, 1, 1, 0, 2))}));
}

TEST_F(SchedulesTest, AStoredDefinitionThatCannotBeReadIsLoggedAndSkippedWhileTheOthersRun) {
  LogCapture logs(LogLevel::info);
  ASSERT_EQ(schedules.upsert("good", Schedule::cron("* * * * *"), "report", "{}"), UpsertOutcome::created);
  client.cmd({"HSET", stream + ":schedules", "bad", "1"});
  client.cmd({"HSET", stream + ":sched:bad", "def", "{\"schedule\": \"not cron\"}", "version", "1"});
  auto s = running();
  clock.set(at(2026, 1, 1, 0, 1, 1));
  ASSERT_TRUE(wait_until([&] { return s->metrics().enqueued == 1; }));
  s->stop();
  EXPECT_EQ(task_ids(), (std::vector<std::string>{id("good", at(2026, 1, 1, 0, 1))}));
  EXPECT_EQ(logs.count(LogLevel::error, "schedule \"bad\": its stored definition cannot be read"), 1u);
  const std::vector<ScheduleInfo> list = schedules.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_NE(list[0].schedule.find("unreadable"), std::string::npos) << list[0].schedule;
}

}  // namespace
}  // namespace streamq::test
