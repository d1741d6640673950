// SPDX-License-Identifier: MIT
// A cron expression read in a named time zone: the daylight-saving rules of
// docs/scheduling.md on top of the fixed-offset arithmetic of cron.hpp. Between two changes of
// a zone's offset the ticks are those of the expression at that offset; at a change:
// - a wall-clock expression (minute and hour fields both fixed: `30 2 * * *`) runs a time the
//   clock skips once, at the first instant after the skip (02:30 on the spring-forward day in
//   Europe/Berlin runs at 03:00), and a time the clock repeats once, at its first occurrence;
// - an expression whose minute or hour field starts with `*` (`0 * * * *`, `*/15 * * * *`)
//   follows elapsed time, as Vixie cron does: the skipped times do not tick, the repeated ones
//   tick in both passes (an hourly schedule ticks 23 times on a 23-hour day, 25 on a 25-hour day).
// No instant is ever a tick twice. Pure functions of their arguments, tested without a server.
#pragma once

#include <chrono>

#include "scheduler/cron.hpp"
#include "scheduler/zone.hpp"

namespace streamq::detail {

/// A cron expression (its utc_offset unused) and the zone it is read in.
struct ZonedCron {
  CronSpec spec;
  TimeZone zone;
};

/// The first tick strictly after `t`; time_point::max() when none within 28 years.
std::chrono::system_clock::time_point zoned_cron_next_after(const ZonedCron& cron,
                                                            std::chrono::system_clock::time_point t);
/// The last tick at or before `t`; time_point::min() when none within 28 years.
std::chrono::system_clock::time_point zoned_cron_latest_at_or_before(const ZonedCron& cron,
                                                                     std::chrono::system_clock::time_point t);

}  // namespace streamq::detail
