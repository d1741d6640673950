// SPDX-License-Identifier: MIT
#include <cstdio>
#include <variant>

#include "scheduler/cron.hpp"
#include "scheduler/zoned_cron.hpp"
#include "streamq/errors.hpp"
#include "streamq/scheduler.hpp"
#include "util/concat.hpp"
#include "util/durations.hpp"

namespace streamq {

using std::chrono::milliseconds;

struct Schedule::Rule {
  std::variant<detail::CronSpec, detail::ZonedCron, milliseconds> rule;
  std::string description;
};

namespace {

std::string offset_text(std::chrono::minutes offset) {
  if (offset.count() == 0) return "";
  const long long total = offset.count() < 0 ? -offset.count() : offset.count();
  char buf[64];  // room for any long long: the compiler cannot see that |offset| <= 24 h
  std::snprintf(buf, sizeof buf, " UTC%c%02lld:%02lld", offset.count() < 0 ? '-' : '+', total / 60,
                total % 60);
  return buf;
}

/// The multiple of `interval` at or below `t` (intervals are aligned to the epoch).
milliseconds floor_to(milliseconds t, milliseconds interval) {
  auto q = t.count() / interval.count();
  if (t.count() % interval.count() < 0) --q;
  return milliseconds(q * interval.count());
}

}  // namespace

Schedule Schedule::cron(std::string_view expression, std::chrono::minutes utc_offset) {
  if (utc_offset < -std::chrono::hours(24) || utc_offset > std::chrono::hours(24)) {
    throw ConfigError("utc_offset must be within +-24 hours");
  }
  return Schedule(std::make_shared<const Rule>(
      Rule{detail::parse_cron(expression, utc_offset), std::string(expression) + offset_text(utc_offset)}));
}

Schedule Schedule::cron(std::string_view expression, std::string_view time_zone) {
  const detail::CronSpec spec = detail::parse_cron(expression);
  const detail::TimeZone zone(time_zone);
  return Schedule(std::make_shared<const Rule>(
      Rule{detail::ZonedCron{spec, zone}, detail::concat(expression, " ", time_zone)}));
}

Schedule Schedule::every(milliseconds interval) {
  detail::check_duration(interval, milliseconds(1), "interval");
  return Schedule(
      std::make_shared<const Rule>(Rule{interval, "every " + std::to_string(interval.count()) + "ms"}));
}

Schedule::TimePoint Schedule::next_after(TimePoint t) const {
  if (const auto* spec = std::get_if<detail::CronSpec>(&rule_->rule))
    return detail::cron_next_after(*spec, t);
  if (const auto* zoned = std::get_if<detail::ZonedCron>(&rule_->rule)) {
    return detail::zoned_cron_next_after(*zoned, t);
  }
  const milliseconds interval = std::get<milliseconds>(rule_->rule);
  const auto ms = std::chrono::floor<milliseconds>(t.time_since_epoch());
  return TimePoint(floor_to(ms, interval) + interval);
}

Schedule::TimePoint Schedule::latest_at_or_before(TimePoint t) const {
  if (const auto* spec = std::get_if<detail::CronSpec>(&rule_->rule)) {
    return detail::cron_latest_at_or_before(*spec, t);
  }
  if (const auto* zoned = std::get_if<detail::ZonedCron>(&rule_->rule)) {
    return detail::zoned_cron_latest_at_or_before(*zoned, t);
  }
  const milliseconds interval = std::get<milliseconds>(rule_->rule);
  const auto ms = std::chrono::floor<milliseconds>(t.time_since_epoch());
  return TimePoint(floor_to(ms, interval));
}

const std::string& Schedule::description() const noexcept { return rule_->description; }

}  // namespace streamq
