// SPDX-License-Identifier: MIT
#include "iso_time.hpp"

#include <cstddef>

namespace streamq::cli {
namespace {

/// Reads exactly `digits` decimal digits at `at`, moving past them.
std::optional<int> number(std::string_view s, std::size_t& at, std::size_t digits) {
  if (at + digits > s.size()) return std::nullopt;
  int v = 0;
  for (std::size_t i = 0; i < digits; ++i) {
    const char c = s[at + i];
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  at += digits;
  return v;
}

bool take(std::string_view s, std::size_t& at, char c) {
  if (at >= s.size() || s[at] != c) return false;
  ++at;
  return true;
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_iso_time(std::string_view s) {
  using namespace std::chrono;
  std::size_t at = 0;
  const auto y = number(s, at, 4);
  if (!y || !take(s, at, '-')) return std::nullopt;
  const auto mo = number(s, at, 2);
  if (!mo || !take(s, at, '-')) return std::nullopt;
  const auto d = number(s, at, 2);
  if (!d || !(take(s, at, 'T') || take(s, at, ' '))) return std::nullopt;
  const auto h = number(s, at, 2);
  if (!h || !take(s, at, ':')) return std::nullopt;
  const auto mi = number(s, at, 2);
  if (!mi) return std::nullopt;
  int sec = 0;
  int ms = 0;
  if (take(s, at, ':')) {
    const auto sv = number(s, at, 2);
    if (!sv) return std::nullopt;
    sec = *sv;
    if (take(s, at, '.')) {
      const auto fraction = number(s, at, 3);
      if (!fraction) return std::nullopt;
      ms = *fraction;
    }
  }
  int offset_min = 0;
  if (!take(s, at, 'Z')) {
    const bool east = take(s, at, '+');
    if (!east && !take(s, at, '-')) return std::nullopt;
    const auto oh = number(s, at, 2);
    if (!oh || !take(s, at, ':')) return std::nullopt;
    const auto om = number(s, at, 2);
    if (!om || *oh > 23 || *om > 59) return std::nullopt;
    offset_min = (east ? 1 : -1) * (*oh * 60 + *om);
  }
  if (at != s.size()) return std::nullopt;
  const year_month_day date{year{*y}, month{static_cast<unsigned>(*mo)}, day{static_cast<unsigned>(*d)}};
  if (!date.ok() || *h > 23 || *mi > 59 || sec > 59) return std::nullopt;
  return sys_days{date} + hours{*h} + minutes{*mi} + seconds{sec} + milliseconds{ms} - minutes{offset_min};
}

}  // namespace streamq::cli
