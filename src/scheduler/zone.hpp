// SPDX-License-Identifier: MIT
// Named time zones (IANA names: Europe/Berlin, America/New_York) from the system's time-zone
// database (/usr/share/zoneinfo, Debian's tzdata), read through Howard Hinnant's date/tz
// library (libdate-tz, built to use the system's database). zone.cpp is the only file that
// sees that library: the rest of the scheduler sees a zone as stretches of time, each with
// one offset from UTC.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace date {
class time_zone;
}

namespace streamq::detail {

/// A stretch of time [begin, end) over which a zone's offset from UTC does not change.
/// time_point::min() and max() stand for a span without a start or without an end (the
/// database's first and last spans reach beyond what a system_clock time_point holds).
struct ZoneSpan {
  std::chrono::system_clock::time_point begin;
  std::chrono::system_clock::time_point end;
  /// East positive. Offsets that are not whole minutes (local mean time, before about 1900)
  /// are rounded down to the minute.
  std::chrono::minutes offset;
};

/// A zone of the system's time-zone database. A value type: the database outlives it.
/// Thread safety: const calls from any thread.
class TimeZone {
 public:
  /// @throws ConfigError naming `name` when the database has no such zone, or when there is no
  ///   database (no /usr/share/zoneinfo: Debian's tzdata is not installed).
  explicit TimeZone(std::string_view name);

  /// The span that holds `t`.
  ZoneSpan span_at(std::chrono::system_clock::time_point t) const;
  /// The span that ends where `span` begins. `span.begin` must not be time_point::min().
  ZoneSpan span_before(const ZoneSpan& span) const;

 private:
  const date::time_zone* zone_;
};

}  // namespace streamq::detail
