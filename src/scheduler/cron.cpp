// SPDX-License-Identifier: MIT
#include "scheduler/cron.hpp"

#include <array>
#include <cctype>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "streamq/errors.hpp"
#include "util/concat.hpp"

namespace streamq::detail {
namespace {

using namespace std::chrono;
using LocalMinutes = sys_time<minutes>;  // a civil time at the spec's offset, as if it were UTC

constexpr std::array<std::string_view, 12> kMonthNames = {"jan", "feb", "mar", "apr", "may", "jun",
                                                          "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<std::string_view, 7> kDayNames = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

/// How far next/latest look: every combination of day of month, month and weekday recurs
/// within 28 years (Feb 29 across a century that is not a leap year takes 8).
constexpr int kSearchYears = 28;

struct FieldDef {
  std::string_view name;
  int min;
  int max;        // largest value accepted (7 for day of week: Sunday again)
  int star_max;   // largest value `*` covers (6 for day of week)
  int name_base;  // value of the first name (1 for months, 0 for days); names empty = none
  const std::string_view* names;
  std::size_t name_count;
};

constexpr FieldDef kFields[5] = {
    {"minute", 0, 59, 59, 0, nullptr, 0},
    {"hour", 0, 23, 23, 0, nullptr, 0},
    {"day of month", 1, 31, 31, 0, nullptr, 0},
    {"month", 1, 12, 12, 1, kMonthNames.data(), kMonthNames.size()},
    {"day of week", 0, 7, 6, 0, kDayNames.data(), kDayNames.size()},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  CronSpec parse(std::chrono::minutes utc_offset) {
    CronSpec spec;
    spec.utc_offset = utc_offset;
    std::string_view body = text_;
    std::size_t base = 0;
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front()))) {
      body.remove_prefix(1);
      ++base;
    }
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.remove_suffix(1);
    if (body.empty()) fail_whole("is empty; expected 5 fields (minute hour day-of-month month day-of-week)");
    if (body.front() == '@') {
      const std::string macro = lower(body);
      const char* expansion = macro == "@hourly"                           ? "0 * * * *"
                              : macro == "@daily" || macro == "@midnight"  ? "0 0 * * *"
                              : macro == "@weekly"                         ? "0 0 * * 0"
                              : macro == "@monthly"                        ? "0 0 1 * *"
                              : macro == "@yearly" || macro == "@annually" ? "0 0 1 1 *"
                                                                           : nullptr;
      if (expansion == nullptr) {
        fail_whole("unknown macro " + std::string(body) +
                   " (known: @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually)");
      }
      return Parser(expansion).parse(utc_offset);
    }

    std::vector<std::pair<std::string_view, std::size_t>> fields;  // text, 0-based offset in text_
    std::size_t i = 0;
    while (i < body.size()) {
      if (std::isspace(static_cast<unsigned char>(body[i]))) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < body.size() && !std::isspace(static_cast<unsigned char>(body[j]))) ++j;
      fields.emplace_back(body.substr(i, j - i), base + i);
      i = j;
    }
    if (fields.size() != 5) {
      fail_whole("has " + std::to_string(fields.size()) +
                 " fields; expected 5 (minute hour day-of-month month day-of-week)");
    }
    std::bitset<64> bits[5];
    for (std::size_t f = 0; f < 5; ++f) bits[f] = parse_field(kFields[f], fields[f].first, fields[f].second);
    for (int v = 0; v < 60; ++v) spec.minutes[v] = bits[0][v];
    for (int v = 0; v < 24; ++v) spec.hours[v] = bits[1][v];
    for (int v = 1; v <= 31; ++v) spec.days_of_month[v] = bits[2][v];
    for (int v = 1; v <= 12; ++v) spec.months[v] = bits[3][v];
    for (int v = 0; v < 7; ++v) spec.days_of_week[v] = bits[4][v] || (v == 0 && bits[4][7]);
    spec.minute_star = fields[0].first.front() == '*';
    spec.hour_star = fields[1].first.front() == '*';
    spec.dom_star = fields[2].first.front() == '*';
    spec.dow_star = fields[4].first.front() == '*';
    return spec;
  }

  [[noreturn]] void fail_whole(const std::string& why) const {
    throw ConfigError("cron \"" + std::string(text_) + "\" " + why);
  }

 private:
  [[noreturn]] void fail(const FieldDef& field, std::size_t offset, const std::string& why) const {
    throw ConfigError("cron \"" + std::string(text_) + "\": " + std::string(field.name) + " at position " +
                      std::to_string(offset + 1) + ": " + why);
  }

  std::bitset<64> parse_field(const FieldDef& field, std::string_view text, std::size_t offset) const {
    std::bitset<64> bits;
    std::size_t start = 0;
    for (;;) {
      const std::size_t comma = text.find(',', start);
      const std::string_view item =
          text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
      parse_item(field, item, offset + start, bits);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return bits;
  }

  void parse_item(const FieldDef& field, std::string_view item, std::size_t offset,
                  std::bitset<64>& bits) const {
    if (item.empty()) fail(field, offset, "empty list element");
    const std::size_t slash = item.find('/');
    const std::string_view range = item.substr(0, slash);
    int step = 1;
    if (slash != std::string_view::npos) {
      const std::string_view step_text = item.substr(slash + 1);
      const std::size_t step_offset = offset + slash + 1;
      const std::optional<int> s = number(step_text);
      if (!s) fail(field, step_offset, "step \"" + std::string(step_text) + "\" is not a number");
      if (*s < 1) fail(field, step_offset, "step must be at least 1");
      if (*s > field.max)
        fail(field, step_offset, "step " + std::to_string(*s) + " is larger than the field's range");
      step = *s;
    }
    int lo = 0;
    int hi = 0;
    if (range == "*") {
      lo = field.min;
      hi = field.star_max;
    } else {
      const std::size_t dash = range.find('-');
      lo = value(field, range.substr(0, dash), offset);
      if (dash != std::string_view::npos) {
        hi = value(field, range.substr(dash + 1), offset + dash + 1);
        if (lo > hi) {
          fail(field, offset,
               "range " + std::string(range) + " runs backwards (" + std::to_string(lo) + " > " +
                   std::to_string(hi) + ")");
        }
      } else {
        hi = slash != std::string_view::npos ? field.max : lo;  // `a/n`: a to the maximum
      }
    }
    for (int v = lo; v <= hi; v += step) bits[static_cast<std::size_t>(v)] = true;
  }

  int value(const FieldDef& field, std::string_view text, std::size_t offset) const {
    if (text.empty()) fail(field, offset, "missing value");
    if (std::isdigit(static_cast<unsigned char>(text.front()))) {
      const std::optional<int> v = number(text);
      if (!v) fail(field, offset, "\"" + std::string(text) + "\" is not a number");
      if (*v < field.min || *v > field.max) {
        fail(field, offset,
             std::to_string(*v) + " is out of range " + std::to_string(field.min) + "-" +
                 std::to_string(field.max));
      }
      return *v;
    }
    const std::string name = lower(text);
    for (std::size_t k = 0; k < field.name_count; ++k) {
      if (field.names[k] == name) return field.name_base + static_cast<int>(k);
    }
    if (field.name_count == 0) fail(field, offset, concat("\"", text, "\" is not a number"));
    fail(
        field, offset,
        concat("\"", text, "\" is not a number or a name (", field.names[0], ", ", field.names[1], ", ...)"));
  }

  static std::optional<int> number(std::string_view text) {
    if (text.empty() || text.size() > 4) return std::nullopt;
    int v = 0;
    for (char c : text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
      v = v * 10 + (c - '0');
    }
    return v;
  }

  std::string_view text_;
};

LocalMinutes to_local(const CronSpec& spec, system_clock::time_point t) {
  return floor<minutes>(t) + spec.utc_offset;
}

}  // namespace

CronSpec parse_cron(std::string_view text, std::chrono::minutes utc_offset) {
  Parser parser(text);
  CronSpec spec = parser.parse(utc_offset);
  const auto probe = sys_days(year(2000) / January / 1);
  if (cron_next_after(spec, probe) == system_clock::time_point::max()) {
    parser.fail_whole("matches no date (the days of month given do not occur in the months given)");
  }
  return spec;
}

bool cron_day_matches(const CronSpec& spec, sys_days day) {
  const year_month_day ymd(day);
  const bool dom = spec.days_of_month[static_cast<unsigned>(ymd.day())];
  const bool dow = spec.days_of_week[weekday(day).c_encoding()];
  // Vixie cron: a field starting with `*` does not restrict; two restricted fields are ORed.
  if (spec.dom_star || spec.dow_star) return dom && dow;
  return dom || dow;
}

system_clock::time_point cron_next_after(const CronSpec& spec, system_clock::time_point t) {
  LocalMinutes local = to_local(spec, t) + minutes(1);
  const year limit = year_month_day(floor<days>(local)).year() + years(kSearchYears);
  for (;;) {
    const sys_days d = floor<days>(local);
    const year_month_day ymd(d);
    if (ymd.year() > limit) return system_clock::time_point::max();
    if (!spec.months[static_cast<unsigned>(ymd.month())]) {
      local = sys_days((ymd.year() / ymd.month() + months(1)) / 1);
      continue;
    }
    if (!cron_day_matches(spec, d)) {
      local = d + days(1);
      continue;
    }
    const auto h = duration_cast<hours>(local - d);
    if (!spec.hours[static_cast<std::size_t>(h.count())]) {
      local = d + h + hours(1);
      continue;
    }
    const auto m = local - d - h;
    if (!spec.minutes[static_cast<std::size_t>(m.count())]) {
      local += minutes(1);
      continue;
    }
    return local - spec.utc_offset;
  }
}

system_clock::time_point cron_latest_at_or_before(const CronSpec& spec, system_clock::time_point t) {
  LocalMinutes local = to_local(spec, t);
  const year limit = year_month_day(floor<days>(local)).year() - years(kSearchYears);
  for (;;) {
    const sys_days d = floor<days>(local);
    const year_month_day ymd(d);
    if (ymd.year() < limit) return system_clock::time_point::min();
    if (!spec.months[static_cast<unsigned>(ymd.month())]) {
      local = sys_days(ymd.year() / ymd.month() / 1) - minutes(1);
      continue;
    }
    if (!cron_day_matches(spec, d)) {
      local = d - minutes(1);
      continue;
    }
    const auto h = duration_cast<hours>(local - d);
    if (!spec.hours[static_cast<std::size_t>(h.count())]) {
      local = d + h - minutes(1);
      continue;
    }
    const auto m = local - d - h;
    if (!spec.minutes[static_cast<std::size_t>(m.count())]) {
      local -= minutes(1);
      continue;
    }
    return local - spec.utc_offset;
  }
}

std::string format_tick(system_clock::time_point t) {
  const auto ms = floor<milliseconds>(t);
  const sys_days d = floor<days>(ms);
  const year_month_day ymd(d);
  const hh_mm_ss<milliseconds> hms(ms - d);
  char buf[96];  // room for any int in every field, so -Wformat-truncation has nothing to say
  int n = std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d", static_cast<int>(ymd.year()),
                        static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                        static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                        static_cast<int>(hms.seconds().count()));
  const auto frac = hms.subseconds().count();
  if (frac != 0 && n > 0) {
    std::snprintf(buf + n, sizeof buf - static_cast<std::size_t>(n), ".%03d", static_cast<int>(frac));
  }
  return std::string(buf) + "Z";
}

}  // namespace streamq::detail
