// SPDX-License-Identifier: MIT
#include "scheduler/zone.hpp"

#include <date/tz.h>

#include <exception>

#include "streamq/errors.hpp"
#include "util/concat.hpp"

namespace streamq::detail {

namespace {

using std::chrono::seconds;
using TimePoint = std::chrono::system_clock::time_point;

const date::time_zone* locate(std::string_view name) {
  try {
    return date::locate_zone(name);
  } catch (const std::exception& e) {
    // The library says "<name> not found in timezone database", or that it found no database.
    throw ConfigError(concat("time zone \"", name, "\" is not in the system's time-zone database (", e.what(),
                             "): give an IANA name such as Europe/Berlin, with tzdata installed"));
  }
}

/// `s` as a system_clock time point; min() or max() beyond what one holds (the database's
/// first and last spans begin and end in the years -32767 and 32767).
TimePoint clamped(std::chrono::sys_seconds s) {
  if (s <= std::chrono::ceil<seconds>(TimePoint::min())) return TimePoint::min();
  if (s >= std::chrono::floor<seconds>(TimePoint::max())) return TimePoint::max();
  return TimePoint(s);
}

}  // namespace

TimeZone::TimeZone(std::string_view name) : zone_(locate(name)) {}

ZoneSpan TimeZone::span_at(TimePoint t) const {
  const date::sys_info info = zone_->get_info(std::chrono::floor<seconds>(t));
  return {clamped(info.begin), clamped(info.end), std::chrono::floor<std::chrono::minutes>(info.offset)};
}

ZoneSpan TimeZone::span_before(const ZoneSpan& span) const { return span_at(span.begin - seconds(1)); }

}  // namespace streamq::detail
