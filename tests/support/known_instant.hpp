// SPDX-License-Identifier: MIT
// Test support: the instant the wire-format tests write and read, 2026-11-29T18:00:00.123456 UTC,
// and the time point of a count of microseconds since the epoch.
#pragma once

#include <chrono>
#include <cstdint>

namespace streamq::test {

// 2026-11-29T18:00:00.123456 UTC.
constexpr std::int64_t kKnownMicros = 1795975200123456;
constexpr std::int64_t kKnownSeconds = 1795975200;

inline std::chrono::system_clock::time_point from_micros(std::int64_t us) {
  using namespace std::chrono;
  return system_clock::time_point(duration_cast<system_clock::duration>(microseconds(us)));
}

}  // namespace streamq::test
