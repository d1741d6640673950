// SPDX-License-Identifier: MIT
#include <cstdio>
#include <optional>
#include <variant>
#include <vector>

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

namespace {

std::vector<std::string_view> words_of(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ' ' || text[i] == '\t') {
      ++i;
      continue;
    }
    const std::size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t') ++i;
    words.push_back(text.substr(start, i - start));
  }
  return words;
}

/// `UTC+01:00` or `UTC-05:30` (what offset_text prints) as minutes east; nullopt otherwise.
std::optional<std::chrono::minutes> parse_offset(std::string_view w) {
  if (w.size() != 9 || !w.starts_with("UTC") || (w[3] != '+' && w[3] != '-') || w[6] != ':')
    return std::nullopt;
  int hh = 0;
  int mm = 0;
  for (const std::size_t i : {4u, 5u, 7u, 8u}) {
    if (w[i] < '0' || w[i] > '9') return std::nullopt;
  }
  hh = (w[4] - '0') * 10 + (w[5] - '0');
  mm = (w[7] - '0') * 10 + (w[8] - '0');
  if (mm > 59) return std::nullopt;
  const std::chrono::minutes m(hh * 60 + mm);
  return w[3] == '-' ? -m : m;
}

}  // namespace

Schedule Schedule::parse(std::string_view description) {
  const std::vector<std::string_view> words = words_of(description);
  if (words.empty()) throw ConfigError("schedule \"" + std::string(description) + "\" is empty");
  if (words[0] == "every") {
    const std::string_view n = words.size() == 2 ? words[1] : std::string_view();
    if (n.size() < 3 || !n.ends_with("ms") || n.size() > 20) {
      throw ConfigError("schedule \"" + std::string(description) + "\": expected \"every <N>ms\"");
    }
    long long ms = 0;
    for (const char c : n.substr(0, n.size() - 2)) {
      if (c < '0' || c > '9') {
        throw ConfigError("schedule \"" + std::string(description) + "\": expected \"every <N>ms\"");
      }
      ms = ms * 10 + (c - '0');
    }
    return every(milliseconds(ms));
  }
  // A cron expression is one word (@daily) or five; one more is its zone or offset.
  const std::size_t fields = words[0].starts_with('@') ? 1 : 5;
  if (words.size() < fields || words.size() > fields + 1) {
    throw ConfigError("schedule \"" + std::string(description) + "\": expected " +
                      (fields == 1 ? "a @name" : "5 cron fields") + " and at most a time zone after them");
  }
  const std::string_view expression = description.substr(
      static_cast<std::size_t>(words[0].data() - description.data()),
      static_cast<std::size_t>(words[fields - 1].data() + words[fields - 1].size() - words[0].data()));
  if (words.size() == fields) return cron(expression);
  if (const auto offset = parse_offset(words[fields])) return cron(expression, *offset);
  return cron(expression, words[fields]);
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
