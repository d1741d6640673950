// SPDX-License-Identifier: MIT
// The bounds of every duration an option takes. Below: each option's own least value. Above:
// one bound for all, about ten years, far beyond any sensible setting and far below what the
// arithmetic a duration goes into can hold (a steady-clock deadline `now + shutdown_grace`
// in nanoseconds, `3 * heartbeat_interval`, `block + 1000 ms`, a Redis PX or BLOCK in ms, a
// delayed task's due time as a Lua double). A value past it (milliseconds::max() for "never")
// is a ConfigError, not a deadline that wraps around into the past.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "streamq/errors.hpp"

namespace streamq::detail {

inline constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(24 * 365 * 10);

/// ConfigError unless `least` <= `d` <= kMaxDuration. `name` is the option's name.
inline void check_duration(std::chrono::milliseconds d, std::chrono::milliseconds least,
                           std::string_view name) {
  if (d < least) {
    throw ConfigError(std::string(name) + " must be >= " + std::to_string(least.count()) + " ms");
  }
  if (d > kMaxDuration) {
    throw ConfigError(std::string(name) + " must be <= " + std::to_string(kMaxDuration.count()) +
                      " ms (about ten years)");
  }
}

/// A time as milliseconds since the Unix epoch (what the scripts and records hold), and back.
inline std::int64_t unix_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
inline std::chrono::system_clock::time_point from_unix_ms(std::int64_t ms) {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

}  // namespace streamq::detail
