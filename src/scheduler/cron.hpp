// SPDX-License-Identifier: MIT
// Cron expressions: the 5-field parser and the tick arithmetic behind Schedule::cron. Pure
// functions of their arguments, tested without a server.
#pragma once

#include <bitset>
#include <chrono>
#include <string>
#include <string_view>

namespace streamq::detail {

/// A parsed cron expression.
struct CronSpec {
  std::bitset<60> minutes;
  std::bitset<24> hours;
  std::bitset<32> days_of_month;  // bit 0 unused
  std::bitset<13> months;         // bit 0 unused
  std::bitset<7> days_of_week;    // 0 = Sunday
  /// The field starts with `*`: it does not restrict the day (the day-of-month/day-of-week
  /// OR rule applies only when both are restricted).
  bool dom_star = true;
  bool dow_star = true;
  /// The minute or the hour field starts with `*` (`*/15 * * * *`, `0 * * * *`): in a named
  /// time zone the expression follows elapsed time across daylight-saving changes rather than
  /// wall-clock times (scheduler/zoned_cron.hpp).
  bool minute_star = true;
  bool hour_star = true;
  /// Fixed offset from UTC at which the fields are read (east positive).
  std::chrono::minutes utc_offset{0};
};

/// Parses `text`. @throws ConfigError: `cron "<text>": <field> at position <p>: <why>`, or
/// that it matches no date.
CronSpec parse_cron(std::string_view text, std::chrono::minutes utc_offset = std::chrono::minutes(0));

/// True when the civil day `day` (read at the spec's offset) matches the day fields.
bool cron_day_matches(const CronSpec& spec, std::chrono::sys_days day);

/// First matching minute strictly after `t`; time_point::max() when none within 28 years.
std::chrono::system_clock::time_point cron_next_after(const CronSpec& spec,
                                                      std::chrono::system_clock::time_point t);
/// Last matching minute at or before `t`; time_point::min() when none within 28 years.
std::chrono::system_clock::time_point cron_latest_at_or_before(const CronSpec& spec,
                                                               std::chrono::system_clock::time_point t);

/// `2026-03-01T02:00:00Z`, with `.mmm` before the Z when the time has milliseconds.
std::string format_tick(std::chrono::system_clock::time_point t);

}  // namespace streamq::detail
