// SPDX-License-Identifier: MIT
// Cron parsing and tick arithmetic (Schedule), and the Scheduler's option checks: no server.
#include <algorithm>
#include <chrono>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "scheduler/cron.hpp"
#include "utc_time.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono;
using TimePoint = system_clock::time_point;

std::string text(TimePoint t) { return detail::format_tick(t); }

/// The next `n` ticks after `from`.
std::vector<std::string> ticks(const Schedule& s, TimePoint from, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    from = s.next_after(from);
    out.push_back(text(from));
  }
  return out;
}

TEST(Cron, EveryMinuteNextAndLatest) {
  const Schedule s = Schedule::cron("* * * * *");
  EXPECT_EQ(text(s.next_after(at(2026, 1, 1, 12, 0, 30))), "2026-01-01T12:01:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 1, 1, 12, 0, 30))), "2026-01-01T12:00:00Z");
  // On a tick: next is strictly after, latest is the tick itself.
  EXPECT_EQ(text(s.next_after(at(2026, 1, 1, 12, 0))), "2026-01-01T12:01:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 1, 1, 12, 0))), "2026-01-01T12:00:00Z");
  EXPECT_EQ(text(s.next_after(at(2026, 12, 31, 23, 59, 59))), "2027-01-01T00:00:00Z");
}

TEST(Cron, ListsRangesAndSteps) {
  EXPECT_EQ(ticks(Schedule::cron("0,30 1-2 * * *"), at(2026, 1, 1), 5),
            (std::vector<std::string>{"2026-01-01T01:00:00Z", "2026-01-01T01:30:00Z", "2026-01-01T02:00:00Z",
                                      "2026-01-01T02:30:00Z", "2026-01-02T01:00:00Z"}));
  EXPECT_EQ(ticks(Schedule::cron("10-20/5 * * * *"), at(2026, 1, 1), 4),
            (std::vector<std::string>{"2026-01-01T00:10:00Z", "2026-01-01T00:15:00Z", "2026-01-01T00:20:00Z",
                                      "2026-01-01T01:10:00Z"}));
  // `a/n` runs from a to the field's maximum.
  EXPECT_EQ(
      ticks(Schedule::cron("50/5 * * * *"), at(2026, 1, 1), 3),
      (std::vector<std::string>{"2026-01-01T00:50:00Z", "2026-01-01T00:55:00Z", "2026-01-01T01:50:00Z"}));
  EXPECT_EQ(ticks(Schedule::cron("*/20 */12 * * *"), at(2026, 1, 1, 0, 1), 4),
            (std::vector<std::string>{"2026-01-01T00:20:00Z", "2026-01-01T00:40:00Z", "2026-01-01T12:00:00Z",
                                      "2026-01-01T12:20:00Z"}));
}

TEST(Cron, WeekdaysAcrossAWeekend) {
  // 2026-01-02 is a Friday.
  const Schedule s = Schedule::cron("*/15 9-17 * * mon-fri");
  EXPECT_EQ(text(s.next_after(at(2026, 1, 2, 17, 50))), "2026-01-05T09:00:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 1, 5, 8, 59))), "2026-01-02T17:45:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 1, 5, 9, 14))), "2026-01-05T09:00:00Z");
}

TEST(Cron, MonthAndDayNamesAnyCaseAndSevenIsSunday) {
  EXPECT_EQ(
      ticks(Schedule::cron("0 0 1 JAN,jul *"), at(2026, 1, 1), 3),
      (std::vector<std::string>{"2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z", "2027-07-01T00:00:00Z"}));
  // 2026-01-04 is a Sunday.
  for (const char* e : {"0 0 * * 0", "0 0 * * 7", "0 0 * * Sun", "0 0 * * 6-7"}) {
    EXPECT_EQ(text(Schedule::cron(e).next_after(at(2026, 1, 3, 1))), "2026-01-04T00:00:00Z") << e;
  }
  EXPECT_EQ(text(Schedule::cron("0 0 * * 6-7").next_after(at(2026, 1, 2, 1))), "2026-01-03T00:00:00Z");
}

TEST(Cron, DayOfMonthOrDayOfWeekWhenBothAreRestricted) {
  // February 2026: the 1st is a Sunday; Fridays are the 6th, 13th, 20th and 27th.
  EXPECT_EQ(ticks(Schedule::cron("0 0 10 * fri"), at(2026, 2, 1), 4),
            (std::vector<std::string>{"2026-02-06T00:00:00Z", "2026-02-10T00:00:00Z", "2026-02-13T00:00:00Z",
                                      "2026-02-20T00:00:00Z"}));
  // Day of week unrestricted: only the day of month counts.
  EXPECT_EQ(ticks(Schedule::cron("0 0 10 * *"), at(2026, 2, 1), 2),
            (std::vector<std::string>{"2026-02-10T00:00:00Z", "2026-03-10T00:00:00Z"}));
  // A field starting with `*` does not restrict (Vixie cron): odd days that are Fridays.
  EXPECT_EQ(ticks(Schedule::cron("0 0 */2 * fri"), at(2026, 2, 1), 2),
            (std::vector<std::string>{"2026-02-13T00:00:00Z", "2026-02-27T00:00:00Z"}));
}

TEST(Cron, LeapDayIsFoundYearsAway) {
  const Schedule s = Schedule::cron("0 0 29 2 *");
  EXPECT_EQ(text(s.next_after(at(2026, 3, 1))), "2028-02-29T00:00:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 3, 1))), "2024-02-29T00:00:00Z");
  EXPECT_EQ(text(s.next_after(at(2096, 3, 1))), "2104-02-29T00:00:00Z");  // 2100 is no leap year
}

TEST(Cron, MacrosAreTheirExpansions) {
  const std::pair<const char*, const char*> macros[] = {{"@hourly", "0 * * * *"},   {"@daily", "0 0 * * *"},
                                                        {"@midnight", "0 0 * * *"}, {"@weekly", "0 0 * * 0"},
                                                        {"@monthly", "0 0 1 * *"},  {"@yearly", "0 0 1 1 *"},
                                                        {"@ANNUALLY", "0 0 1 1 *"}};
  for (const auto& [macro, expansion] : macros) {
    const Schedule m = Schedule::cron(macro);
    const Schedule e = Schedule::cron(expansion);
    for (TimePoint t = at(2026, 1, 1, 0, 30); t < at(2028, 1, 1); t += hours(24 * 19 + 7)) {
      EXPECT_EQ(m.next_after(t), e.next_after(t)) << macro << " at " << text(t);
      EXPECT_EQ(m.latest_at_or_before(t), e.latest_at_or_before(t)) << macro << " at " << text(t);
    }
  }
  EXPECT_EQ(text(Schedule::cron("@weekly").next_after(at(2026, 1, 1))), "2026-01-04T00:00:00Z");
}

TEST(Cron, FixedUtcOffset) {
  const Schedule plus2 = Schedule::cron("0 9 * * *", hours(2));
  EXPECT_EQ(text(plus2.next_after(at(2026, 1, 1))), "2026-01-01T07:00:00Z");
  EXPECT_EQ(plus2.description(), "0 9 * * * UTC+02:00");
  EXPECT_EQ(text(Schedule::cron("0 1 * * *", -hours(5)).next_after(at(2026, 1, 1))), "2026-01-01T06:00:00Z");
  // Monday 00:00 at UTC+02:00 is Sunday 22:00 UTC; 2026-01-04 is a Sunday.
  EXPECT_EQ(text(Schedule::cron("0 0 * * mon", hours(2)).next_after(at(2026, 1, 1))), "2026-01-04T22:00:00Z");
  EXPECT_EQ(text(Schedule::cron("30 0 * * *", minutes(-90)).latest_at_or_before(at(2026, 1, 1, 3))),
            "2026-01-01T02:00:00Z");
  EXPECT_THROW(Schedule::cron("* * * * *", hours(25)), ConfigError);
}

/// The minute `t` matches the spec, decided minute by minute (the reference for the jumps).
bool matches(const detail::CronSpec& spec, TimePoint t) {
  const auto local = floor<minutes>(t) + spec.utc_offset;
  const sys_days d = floor<days>(local);
  const year_month_day ymd(d);
  const hh_mm_ss<minutes> hm(local - d);
  return spec.minutes[static_cast<std::size_t>(hm.minutes().count())] &&
         spec.hours[static_cast<std::size_t>(hm.hours().count())] &&
         spec.months[static_cast<unsigned>(ymd.month())] && detail::cron_day_matches(spec, d);
}

TEST(Cron, NextAndLatestAgreeWithAMinuteByMinuteScan) {
  for (const char* e :
       {"*/7 3-5 * * *", "59 23 28-31 * *", "0 12 * 2 mon", "15 */5 1,15 * wed", "0 0 1 3 *"}) {
    const detail::CronSpec spec = detail::parse_cron(e, minutes(30));
    const Schedule s = Schedule::cron(e, minutes(30));
    // Every matching minute of a window, found one minute at a time.
    const TimePoint first = at(2026, 1, 1);
    const TimePoint last = at(2026, 4, 1);
    std::vector<TimePoint> matching;
    for (TimePoint m = first; m < last; m += minutes(1)) {
      if (matches(spec, m)) matching.push_back(m);
    }
    ASSERT_FALSE(matching.empty()) << e;
    // Every 13 min 13 s of February and March against that list.
    int checked = 0;
    for (TimePoint t = at(2026, 2, 1) + seconds(5); t < at(2026, 3, 31); t += seconds(13 * 60 + 13)) {
      const auto after = std::upper_bound(matching.begin(), matching.end(), t);
      if (after != matching.end()) {
        ASSERT_EQ(text(s.next_after(t)), text(*after)) << e << " after " << text(t);
        ++checked;
      }
      if (after != matching.begin()) {
        ASSERT_EQ(text(s.latest_at_or_before(t)), text(*std::prev(after))) << e << " at " << text(t);
        ++checked;
      }
    }
    EXPECT_GT(checked, 100) << e;
  }
}

TEST(Schedule, IntervalsAreAlignedToTheEpoch) {
  const Schedule s = Schedule::every(seconds(30));
  EXPECT_EQ(text(s.next_after(at(2026, 1, 1, 12, 0, 10))), "2026-01-01T12:00:30Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 1, 1, 12, 0, 10))), "2026-01-01T12:00:00Z");
  EXPECT_EQ(text(s.next_after(at(2026, 1, 1, 12, 0, 30))), "2026-01-01T12:01:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 1, 1, 12, 0, 30))), "2026-01-01T12:00:30Z");
  EXPECT_EQ(s.description(), "every 30000ms");
  const Schedule ms = Schedule::every(milliseconds(250));
  EXPECT_EQ(text(ms.next_after(at(2026, 1, 1) + milliseconds(10))), "2026-01-01T00:00:00.250Z");
  EXPECT_THROW(Schedule::every(milliseconds(0)), ConfigError);
  EXPECT_THROW(Schedule::every(milliseconds(-5)), ConfigError);
}

struct BadCron {
  const char* expression;
  const char* message;  // a part of what() that names the field, the position and why
};

TEST(Cron, BadExpressionsSayWhereAndWhy) {
  const BadCron cases[] = {
      {"", "is empty"},
      {"   ", "is empty"},
      {"* * * *", "has 4 fields; expected 5"},
      {"* * * * * *", "has 6 fields; expected 5"},
      {"60 * * * *", "minute at position 1: 60 is out of range 0-59"},
      {"* 24 * * *", "hour at position 3: 24 is out of range 0-23"},
      {"* * 0 * *", "day of month at position 5: 0 is out of range 1-31"},
      {"* * 32 * *",
       "cron \"* * 32 * *\": day of month at position 5: 32 is out of range 1-31"},  // docs/scheduling.md
      {"* * * 13 *", "month at position 7: 13 is out of range 1-12"},
      {"* * * * 8", "day of week at position 9: 8 is out of range 0-7"},
      {"*/0 * * * *", "minute at position 3: step must be at least 1"},
      {"1-5/ * * * *", "minute at position 5: step \"\" is not a number"},
      {"5-3 * * * *", "minute at position 1: range 5-3 runs backwards"},
      {"* * * foo *", "month at position 7: \"foo\" is not a number or a name"},
      {"* * * * mon-xyz", "day of week at position 13: \"xyz\" is not a number or a name"},
      {"1,,2 * * * *", "minute at position 3: empty list element"},
      {"x * * * *", "minute at position 1: \"x\" is not a number"},
      {"0 0 * jan- *", "month at position 11: missing value"},
      {"1x * * * *", "minute at position 1: \"1x\" is not a number"},
      {"@reboot", "unknown macro @reboot"},
      {"0 0 30 2 *", "matches no date"},
      {"0 0 31 4,6,9,11 *", "matches no date"},
  };
  for (const BadCron& c : cases) {
    try {
      Schedule::cron(c.expression);
      ADD_FAILURE() << "no ConfigError for \"" << c.expression << "\"";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
          << "\"" << c.expression << "\": " << e.what() << "\n  expected: " << c.message;
      EXPECT_NE(std::string(e.what()).find("cron \"" + std::string(c.expression) + "\""), std::string::npos)
          << e.what();
    }
  }
}

TEST(Cron, FormatsTicks) {
  EXPECT_EQ(detail::format_tick(at(2026, 3, 1, 2)), "2026-03-01T02:00:00Z");
  EXPECT_EQ(detail::format_tick(at(2026, 3, 1, 2) + milliseconds(250)), "2026-03-01T02:00:00.250Z");
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(SchedulerOptionsTest, BadOptionsNameTheField) {
  EXPECT_NE(config_error([] { Scheduler s({.queue = {.stream = ""}}); }).find("stream"), std::string::npos);
  EXPECT_NE(config_error([] { Scheduler s({.queue = {.max_len = 0}}); }).find("max_len"), std::string::npos);
  EXPECT_NE(config_error([] { Scheduler s({.misfire_grace = milliseconds(-1)}); }).find("misfire_grace"),
            std::string::npos);
  EXPECT_NE(config_error([] { Scheduler s({.max_wait = milliseconds(0)}); }).find("max_wait"),
            std::string::npos);
  EXPECT_NE(
      config_error([] { Scheduler s({.queue = {.default_max_retries = -1}}); }).find("default_max_retries"),
      std::string::npos);
  EXPECT_NE(config_error([] { Scheduler s({.missed = static_cast<MissedTicks>(7)}); }).find("missed"),
            std::string::npos);
  EXPECT_NE(config_error([] { Scheduler s({.queue = {.connection = {.url = "http://x"}}}); }),
            "(no ConfigError)");
}

TEST(SchedulerOptionsTest, BadSchedulesAreRefusedByAdd) {
  Scheduler s;
  const Schedule every = Schedule::every(seconds(1));
  EXPECT_NE(config_error([&] { s.add("", every, "t", "{}"); }).find("name"), std::string::npos);
  EXPECT_NE(config_error([&] { s.add("a", every, "", "{}"); }).find("task_type"), std::string::npos);
  EXPECT_NE(config_error([&] { s.add("a", every, "t", "{}", {.max_retries = -1}); }).find("max_retries"),
            std::string::npos);
  EXPECT_NE(config_error([&] {
              s.add("a", every, "t", "{}", {.extra_fields = {{"task_id", "x"}}});
            }).find("reserved"),
            std::string::npos);
  ScheduledTaskOptions many;
  for (int i = 0; i < 1000; ++i) many.extra_fields.emplace_back("x" + std::to_string(i), "v");
  EXPECT_NE(config_error([&] { s.add("a", every, "t", "{}", many); }).find("extra fields"),
            std::string::npos);
  EXPECT_THROW(s.add("a", every, "t", "{not json"), PayloadError);
  s.add("a", every, "t", {{"n", 1}});
  EXPECT_NE(config_error([&] { s.add("a", every, "t", "{}"); }).find("already taken"), std::string::npos);
}

TEST(SchedulerOptionsTest, ASchedulerWithNoScheduleAddedRunsTheStoredOnes) {
  // None added is not an error: it runs the queue's stored schedules (SchedulesTest). No
  // server here: stop() before run() makes it return without connecting.
  Scheduler empty({.queue = {.connection = {.url = "redis://127.0.0.1:1"}}});
  empty.stop();
  empty.run();
  EXPECT_EQ(empty.metrics().errors, 0u);
}

TEST(SchedulerOptionsTest, StopBeforeRunMakesRunReturnAndRunsOnlyOnce) {
  // No server: run() returns without connecting once stop() was asked (a hang fails by timeout).
  Scheduler s({.queue = {.connection = {.url = "redis://127.0.0.1:1"}}});
  s.add("a", Schedule::every(seconds(1)), "t", "{}");
  s.stop();
  s.run();
  EXPECT_EQ(s.metrics().errors, 0u);
  EXPECT_NE(config_error([&] { s.run(); }).find("called before"), std::string::npos);
  EXPECT_NE(config_error([&] { s.add("b", Schedule::every(seconds(1)), "t", "{}"); }).find("before run()"),
            std::string::npos);
}

TEST(ScheduleParse, ReadsBackEveryDescriptionItPrintsWithTheSameTicks) {
  const Schedule schedules[] = {Schedule::cron("*/5 * * * *"),
                                Schedule::cron("@daily"),
                                Schedule::cron("@hourly", "Asia/Tokyo"),
                                Schedule::cron("0 9 * * mon-fri", hours(1)),
                                Schedule::cron("0 9 * * mon-fri", -minutes(330)),
                                Schedule::cron("30 2 * * *", "Europe/Berlin"),
                                Schedule::cron("15 2 * * *", "Australia/Lord_Howe"),
                                Schedule::every(milliseconds(30000)),
                                Schedule::every(milliseconds(1))};
  const TimePoint from = at(2026, 3, 28, 0, 0);
  for (const Schedule& s : schedules) {
    const Schedule back = Schedule::parse(s.description());
    EXPECT_EQ(back.description(), s.description());
    TimePoint a = from;
    TimePoint b = from;
    for (int i = 0; i < 50; ++i) {
      a = s.next_after(a);
      b = back.next_after(b);
      ASSERT_EQ(a, b) << s.description() << ", tick " << i;
    }
  }
}

TEST(ScheduleParse, RefusesWhatItCannotRead) {
  for (const char* text :
       {"", "every", "every 30s", "every -5ms", "every 0ms", "* * * *", "* * * * * * *",
        "@daily Europe/Berlin extra", "* * * * * Mars/Olympus_Mons", "* * * * * UTC+01:60"}) {
    EXPECT_THROW(Schedule::parse(text), ConfigError) << '"' << text << '"';
  }
}

}  // namespace
}  // namespace streamq::test
