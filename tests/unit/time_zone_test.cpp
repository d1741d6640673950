// SPDX-License-Identifier: MIT
// Cron expressions read in named time zones (Schedule::cron(expression, "Europe/Berlin")) across
// daylight-saving changes: the rules of docs/scheduling.md#time-zones, with the ticks written
// out by hand in UTC, and next/latest checked against a minute-by-minute reading of the
// zone's clock. The zones come from the system's database (tzdata); no server, no sleeping.
#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "scheduler/cron.hpp"
#include "scheduler/zone.hpp"
#include "utc_time.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono;
using TimePoint = system_clock::time_point;

std::string text(TimePoint t) { return detail::format_tick(t); }

/// Every tick in [from, to), in order, from next_after.
std::vector<std::string> ticks_in(const Schedule& s, TimePoint from, TimePoint to) {
  std::vector<std::string> out;
  for (TimePoint t = s.next_after(from - nanoseconds(1)); t < to; t = s.next_after(t)) out.push_back(text(t));
  return out;
}

/// The same, walking backwards from `to` with latest_at_or_before, put back in order.
std::vector<std::string> ticks_in_backwards(const Schedule& s, TimePoint from, TimePoint to) {
  std::vector<std::string> out;
  for (TimePoint t = s.latest_at_or_before(to - nanoseconds(1)); t >= from;
       t = s.latest_at_or_before(t - nanoseconds(1))) {
    out.insert(out.begin(), text(t));
  }
  return out;
}

/// The ticks of a local day [from, to) in UTC, the same forwards and backwards.
std::vector<std::string> day(const Schedule& s, TimePoint from, TimePoint to) {
  std::vector<std::string> forwards = ticks_in(s, from, to);
  EXPECT_EQ(forwards, ticks_in_backwards(s, from, to)) << s.description();
  return forwards;
}

using Ticks = std::vector<std::string>;

// 2026 in Europe/Berlin: CET (UTC+1) to CEST (UTC+2) on 29 March at 01:00 UTC (02:00 local
// becomes 03:00); back on 25 October at 01:00 UTC (03:00 local becomes 02:00 again).
TEST(TimeZone, BerlinTimeOfDaySkippedRunsAfterTheSkipRepeatedRunsOnce) {
  const Schedule s = Schedule::cron("30 2 * * *", "Europe/Berlin");
  EXPECT_EQ(s.description(), "30 2 * * * Europe/Berlin");
  // 02:30 CET, then 02:30 does not exist: 03:00 CEST, then 02:30 CEST.
  EXPECT_EQ(ticks_in(s, at(2026, 3, 28), at(2026, 3, 31)),
            (Ticks{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}));
  // 02:30 CEST; on the 25th 02:30 comes twice (00:30 and 01:30 UTC): the first only; 02:30 CET.
  EXPECT_EQ(ticks_in(s, at(2026, 10, 24), at(2026, 10, 27)),
            (Ticks{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}));
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 10, 25, 1, 45))), "2026-10-25T00:30:00Z");
  EXPECT_EQ(text(s.next_after(at(2026, 10, 25, 0, 30))), "2026-10-26T01:30:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 3, 29, 0, 59))), "2026-03-28T01:30:00Z");
  EXPECT_EQ(text(s.latest_at_or_before(at(2026, 3, 29, 1, 0))), "2026-03-29T01:00:00Z");
}

TEST(TimeZone, BerlinHourlyFollowsElapsedTime) {
  const Schedule s = Schedule::cron("0 * * * *", "Europe/Berlin");
  // The spring-forward day, 00:00 CET to 00:00 CEST: 23 hours, 23 ticks an hour apart.
  const Ticks spring = day(s, at(2026, 3, 28, 23), at(2026, 3, 29, 22));
  ASSERT_EQ(spring.size(), 23u);
  EXPECT_EQ(Ticks(spring.begin() + 1, spring.begin() + 4),
            (Ticks{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}));  // 01, 03, 04
  // The fall-back day, 00:00 CEST to 00:00 CET: 25 hours, 25 ticks, 02:00 in both passes.
  const Ticks fall = day(s, at(2026, 10, 24, 22), at(2026, 10, 25, 23));
  ASSERT_EQ(fall.size(), 25u);
  EXPECT_EQ(Ticks(fall.begin() + 1, fall.begin() + 5),
            (Ticks{"2026-10-24T23:00:00Z", "2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z",
                   "2026-10-25T02:00:00Z"}));  // 01 CEST, 02 CEST, 02 CET, 03 CET
  // An hour apart throughout: none twice, none left out.
  const Schedule hourly_utc = Schedule::cron("0 * * * *");
  EXPECT_EQ(fall, day(hourly_utc, at(2026, 10, 24, 22), at(2026, 10, 25, 23)));
  EXPECT_EQ(spring, day(hourly_utc, at(2026, 3, 28, 23), at(2026, 3, 29, 22)));
  // @hourly is the same expression.
  EXPECT_EQ(day(Schedule::cron("@hourly", "Europe/Berlin"), at(2026, 10, 24, 22), at(2026, 10, 25, 23)),
            fall);
}

TEST(TimeZone, BerlinEveryQuarterHourFollowsElapsedTime) {
  const Schedule s = Schedule::cron("*/15 * * * *", "Europe/Berlin");
  EXPECT_EQ(day(s, at(2026, 3, 28, 23), at(2026, 3, 29, 22)).size(), 23u * 4);
  EXPECT_EQ(day(s, at(2026, 10, 24, 22), at(2026, 10, 25, 23)).size(), 25u * 4);
  // 01:45 CET, then 03:00 CEST; 02:45 CEST, then 02:00 CET.
  EXPECT_EQ(ticks_in(s, at(2026, 3, 29, 0, 40), at(2026, 3, 29, 1, 20)),
            (Ticks{"2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"}));
  EXPECT_EQ(ticks_in(s, at(2026, 10, 25, 0, 40), at(2026, 10, 25, 1, 20)),
            (Ticks{"2026-10-25T00:45:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:15:00Z"}));
}

TEST(TimeZone, BerlinTimesOfDayInTheChangedHourAreOneTickEach) {
  // 02:00, 02:20 and 02:40 do not exist on 29 March: all three run at 03:00 CEST, once.
  EXPECT_EQ(ticks_in(Schedule::cron("0,20,40 2 * * *", "Europe/Berlin"), at(2026, 3, 29), at(2026, 3, 30)),
            (Ticks{"2026-03-29T01:00:00Z"}));
  // 02:00 (skipped: runs at 03:00) and 03:00 are the same instant: one tick.
  EXPECT_EQ(ticks_in(Schedule::cron("0 2-3 * * *", "Europe/Berlin"), at(2026, 3, 28), at(2026, 3, 30)),
            (Ticks{"2026-03-28T01:00:00Z", "2026-03-28T02:00:00Z", "2026-03-29T01:00:00Z"}));
  // On 25 October they come twice and run in the first pass (CEST) only.
  EXPECT_EQ(ticks_in(Schedule::cron("0,20,40 2 * * *", "Europe/Berlin"), at(2026, 10, 25), at(2026, 10, 26)),
            (Ticks{"2026-10-25T00:00:00Z", "2026-10-25T00:20:00Z", "2026-10-25T00:40:00Z"}));
}

// 2026 in America/New_York: EST (UTC-5) to EDT (UTC-4) on 8 March at 07:00 UTC (02:00 local
// becomes 03:00); back on 1 November at 06:00 UTC (02:00 local becomes 01:00 again).
TEST(TimeZone, NewYork) {
  const Schedule half_past_two = Schedule::cron("30 2 * * *", "America/New_York");
  EXPECT_EQ(ticks_in(half_past_two, at(2026, 3, 7), at(2026, 3, 10)),
            (Ticks{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}));
  // 02:30 exists once on 1 November (the repeated hour is 01:00-01:59).
  EXPECT_EQ(ticks_in(half_past_two, at(2026, 10, 31), at(2026, 11, 3)),
            (Ticks{"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"}));
  const Schedule half_past_one = Schedule::cron("30 1 * * *", "America/New_York");
  EXPECT_EQ(ticks_in(half_past_one, at(2026, 10, 31), at(2026, 11, 3)),
            (Ticks{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}));
  const Schedule hourly = Schedule::cron("0 * * * *", "America/New_York");
  EXPECT_EQ(day(hourly, at(2026, 3, 8, 5), at(2026, 3, 9, 4)).size(), 23u);
  EXPECT_EQ(day(hourly, at(2026, 11, 1, 4), at(2026, 11, 2, 5)).size(), 25u);
  const Schedule quarters = Schedule::cron("*/15 * * * *", "America/New_York");
  EXPECT_EQ(day(quarters, at(2026, 3, 8, 5), at(2026, 3, 9, 4)).size(), 23u * 4);
  EXPECT_EQ(day(quarters, at(2026, 11, 1, 4), at(2026, 11, 2, 5)).size(), 25u * 4);
  // Weekdays are the zone's: Monday 00:30 in New York is Monday 04:30 or 05:30 UTC.
  EXPECT_EQ(ticks_in(Schedule::cron("30 0 * * mon", "America/New_York"), at(2026, 2, 25), at(2026, 3, 12)),
            (Ticks{"2026-03-02T05:30:00Z", "2026-03-09T04:30:00Z"}));
}

// Australia/Lord_Howe moves by half an hour. 2026: UTC+11 to UTC+10:30 on 5 April local
// (4 April 15:00 UTC: 02:00 becomes 01:30, so 01:30-01:59 comes twice); back to UTC+11 on
// 4 October local (3 October 15:30 UTC: 02:00 becomes 02:30, 02:00-02:29 does not exist).
TEST(TimeZone, LordHoweHalfHourFallBack) {
  // 01:45 comes twice on 5 April (14:45 and 15:15 UTC): the first only.
  EXPECT_EQ(ticks_in(Schedule::cron("45 1 * * *", "Australia/Lord_Howe"), at(2026, 4, 3), at(2026, 4, 6)),
            (Ticks{"2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}));
  // The hour 01 as a time of day: 01:00, 01:20, 01:40 in the first pass; the second pass of
  // 01:30-01:59 adds nothing.
  EXPECT_EQ(ticks_in(Schedule::cron("0,20,40 1 * * *", "Australia/Lord_Howe"), at(2026, 4, 4, 12),
                     at(2026, 4, 4, 18)),
            (Ticks{"2026-04-04T14:00:00Z", "2026-04-04T14:20:00Z", "2026-04-04T14:40:00Z"}));
  // With `*` in the minute field it follows elapsed time: 01:30, 01:40 and 01:50 tick again.
  EXPECT_EQ(
      ticks_in(Schedule::cron("*/10 1 * * *", "Australia/Lord_Howe"), at(2026, 4, 4, 12), at(2026, 4, 4, 18)),
      (Ticks{"2026-04-04T14:00:00Z", "2026-04-04T14:10:00Z", "2026-04-04T14:20:00Z", "2026-04-04T14:30:00Z",
             "2026-04-04T14:40:00Z", "2026-04-04T14:50:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:10:00Z",
             "2026-04-04T15:20:00Z"}));
  // The day is 24.5 hours long: 24 o'clocks (none in the repeated half hour), 25 half-pasts
  // (01:30 twice), 98 quarters.
  const TimePoint from = at(2026, 4, 4, 13);    // 00:00 UTC+11
  const TimePoint to = at(2026, 4, 5, 13, 30);  // 00:00 UTC+10:30
  EXPECT_EQ(day(Schedule::cron("0 * * * *", "Australia/Lord_Howe"), from, to).size(), 24u);
  EXPECT_EQ(day(Schedule::cron("30 * * * *", "Australia/Lord_Howe"), from, to).size(), 25u);
  EXPECT_EQ(day(Schedule::cron("*/15 * * * *", "Australia/Lord_Howe"), from, to).size(), 98u);
}

TEST(TimeZone, LordHoweHalfHourSpringForward) {
  // 02:15 does not exist on 4 October: it runs at 02:30 UTC+11 (15:30 UTC), the first instant after.
  EXPECT_EQ(ticks_in(Schedule::cron("15 2 * * *", "Australia/Lord_Howe"), at(2026, 10, 2), at(2026, 10, 5)),
            (Ticks{"2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}));
  // 02:30 exists: it is that same first instant, one tick.
  EXPECT_EQ(
      ticks_in(Schedule::cron("15,30 2 * * *", "Australia/Lord_Howe"), at(2026, 10, 3), at(2026, 10, 4)),
      (Ticks{"2026-10-03T15:30:00Z"}));
  // The day is 23.5 hours long: 23 o'clocks (02:00 is skipped), 24 half-pasts, 94 quarters.
  const TimePoint from = at(2026, 10, 3, 13, 30);  // 00:00 UTC+10:30
  const TimePoint to = at(2026, 10, 4, 13);        // 00:00 UTC+11
  const Ticks hourly = day(Schedule::cron("0 * * * *", "Australia/Lord_Howe"), from, to);
  ASSERT_EQ(hourly.size(), 23u);
  EXPECT_EQ(Ticks(hourly.begin(), hourly.begin() + 3),
            (Ticks{"2026-10-03T13:30:00Z", "2026-10-03T14:30:00Z", "2026-10-03T16:00:00Z"}));  // 00, 01, 03
  EXPECT_EQ(day(Schedule::cron("30 * * * *", "Australia/Lord_Howe"), from, to).size(), 24u);
  EXPECT_EQ(day(Schedule::cron("*/15 * * * *", "Australia/Lord_Howe"), from, to).size(), 94u);
}

TEST(TimeZone, TokyoHasNoDaylightSaving) {
  // UTC+9 all year, on Berlin's and New York's change days too.
  const Schedule s = Schedule::cron("30 2 * * *", "Asia/Tokyo");
  EXPECT_EQ(ticks_in(s, at(2026, 3, 28), at(2026, 3, 30)),
            (Ticks{"2026-03-28T17:30:00Z", "2026-03-29T17:30:00Z"}));
  EXPECT_EQ(ticks_in(s, at(2026, 10, 24), at(2026, 10, 26)),
            (Ticks{"2026-10-24T17:30:00Z", "2026-10-25T17:30:00Z"}));
  const Schedule hourly = Schedule::cron("0 * * * *", "Asia/Tokyo");
  EXPECT_EQ(day(hourly, at(2026, 3, 28, 15), at(2026, 3, 29, 15)).size(), 24u);
  EXPECT_EQ(day(hourly, at(2026, 11, 1, 15), at(2026, 11, 2, 15)).size(), 24u);
  // The same ticks as the fixed offset.
  const Schedule fixed = Schedule::cron("*/15 * * * *", hours(9));
  const Schedule zoned = Schedule::cron("*/15 * * * *", "Asia/Tokyo");
  EXPECT_EQ(day(zoned, at(2026, 3, 1), at(2026, 3, 3)), day(fixed, at(2026, 3, 1), at(2026, 3, 3)));
}

TEST(TimeZone, IntervalsAreAbsoluteAcrossBerlinsChanges) {
  // every(90min) is not read in any zone: across both of Berlin's nights of change its ticks stay
  // 90 minutes of elapsed time apart, at the multiples of 90 minutes since the epoch.
  const Schedule s = Schedule::every(minutes(90));
  for (const TimePoint from : {at(2026, 3, 28, 22), at(2026, 10, 24, 22)}) {
    TimePoint t = s.next_after(from);
    EXPECT_EQ(duration_cast<minutes>(t.time_since_epoch()).count() % 90, 0);
    for (int i = 0; i < 6; ++i) {
      const TimePoint next = s.next_after(t);
      EXPECT_EQ(next - t, minutes(90)) << text(t);
      t = next;
    }
  }
}

std::string config_error(std::string_view expression, std::string_view zone) {
  try {
    Schedule::cron(expression, zone);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(TimeZone, UnknownZonesAndBadExpressionsAreConfigErrors) {
  EXPECT_NE(config_error("0 9 * * *", "Europe/Berln").find("time zone \"Europe/Berln\""), std::string::npos)
      << config_error("0 9 * * *", "Europe/Berln");
  EXPECT_NE(config_error("0 9 * * *", "").find("time zone \"\""), std::string::npos);
  EXPECT_NE(config_error("0 9 * * *", "../../etc/passwd").find("time zone \"../../etc/passwd\""),
            std::string::npos);
  EXPECT_NE(config_error("0 9 * * *", "+01:00").find("time zone \"+01:00\""), std::string::npos);
  EXPECT_NE(config_error("0 24 * * *", "Europe/Berlin").find("hour at position 3: 24 is out of range"),
            std::string::npos);
  EXPECT_EQ(config_error("0 9 * * *", "UTC"), "(no ConfigError)");
}

/// The zone's clock read one minute at a time: the local time at each UTC minute of [from, to).
struct LocalMinute {
  TimePoint utc;
  sys_time<minutes> local;  // the wall-clock reading, as if it were UTC
};

std::vector<LocalMinute> clock_readings(const detail::TimeZone& zone, TimePoint from, TimePoint to) {
  std::vector<LocalMinute> out;
  for (TimePoint u = from; u < to; u += minutes(1)) {
    out.push_back({u, floor<minutes>(u) + zone.span_at(u).offset});
  }
  return out;
}

bool matches(const detail::CronSpec& spec, sys_time<minutes> local) {
  const sys_days d = floor<days>(local);
  const year_month_day ymd(d);
  const hh_mm_ss<minutes> hm(local - d);
  return spec.minutes[static_cast<std::size_t>(hm.minutes().count())] &&
         spec.hours[static_cast<std::size_t>(hm.hours().count())] &&
         spec.months[static_cast<unsigned>(ymd.month())] && detail::cron_day_matches(spec, d);
}

/// The ticks by the rules of docs/scheduling.md, from the clock's readings alone: a frequency
/// (`*` in the minute or hour field) ticks at every minute whose reading matches; a time of
/// day at the first minute that shows a matching reading, and at the first minute after a
/// skip that jumped over one.
std::vector<TimePoint> reference_ticks(const detail::CronSpec& spec, const std::vector<LocalMinute>& clock) {
  const bool frequency = spec.minute_star || spec.hour_star;
  std::vector<TimePoint> out;
  sys_time<minutes> latest_shown = clock.front().local;
  for (std::size_t i = 1; i < clock.size(); ++i) {
    const sys_time<minutes> local = clock[i].local;
    const sys_time<minutes> previous = clock[i - 1].local;
    bool tick = false;
    if (frequency) {
      tick = matches(spec, local);
    } else {
      tick = local > latest_shown && matches(spec, local);
      for (sys_time<minutes> skipped = previous + minutes(1); skipped < local; skipped += minutes(1)) {
        tick = tick || matches(spec, skipped);
      }
    }
    if (tick) out.push_back(clock[i].utc);
    latest_shown = std::max(latest_shown, local);
  }
  return out;
}

TEST(TimeZone, NextAndLatestAgreeWithTheClockReadMinuteByMinute) {
  struct Change {
    const char* zone;
    TimePoint when;
  };
  const Change changes[] = {
      {"Europe/Berlin", at(2026, 3, 29, 1)},       {"Europe/Berlin", at(2026, 10, 25, 1)},
      {"America/New_York", at(2026, 3, 8, 7)},     {"America/New_York", at(2026, 11, 1, 6)},
      {"Australia/Lord_Howe", at(2026, 4, 4, 15)}, {"Australia/Lord_Howe", at(2026, 10, 3, 15, 30)},
      {"Asia/Tokyo", at(2026, 3, 29, 1)}};
  const char* expressions[] = {"30 2 * * *",      "0 * * * *",    "*/15 * * * *", "45 1 * * *",
                               "0,20,40 1 * * *", "*/10 1 * * *", "15 2 * * *",   "0 0 * * *",
                               "59 23 * * *",     "0 1-3 * * *",  "* 2 * * *",    "5 1,2 * * 0-2,5,6"};
  for (const Change& change : changes) {
    const detail::TimeZone zone(change.zone);
    // Two days either side of the change read minute by minute; checked in the middle two days.
    const std::vector<LocalMinute> clock =
        clock_readings(zone, change.when - hours(48), change.when + hours(48));
    for (const char* e : expressions) {
      const Schedule s = Schedule::cron(e, change.zone);
      const std::vector<TimePoint> expected = reference_ticks(detail::parse_cron(e), clock);
      ASSERT_FALSE(expected.empty()) << e << " in " << change.zone;
      int checked = 0;
      for (TimePoint t = change.when - hours(24) + seconds(5); t < change.when + hours(24);
           t += seconds(7 * 60 + 13)) {
        const auto after = std::upper_bound(expected.begin(), expected.end(), t);
        ASSERT_NE(after, expected.end());
        ASSERT_NE(after, expected.begin());
        ASSERT_EQ(text(s.next_after(t)), text(*after)) << e << " in " << change.zone << " after " << text(t);
        ASSERT_EQ(text(s.latest_at_or_before(t)), text(*std::prev(after)))
            << e << " in " << change.zone << " at " << text(t);
        ++checked;
      }
      EXPECT_GT(checked, 300) << e;
    }
  }
}

}  // namespace
}  // namespace streamq::test
