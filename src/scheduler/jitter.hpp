// SPDX-License-Identifier: MIT
// ScheduledTaskOptions::jitter: each tick's task is enqueued at the tick plus an offset that
// every instance, on every platform, computes alike from the schedule's name and the tick.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/durations.hpp"

namespace streamq::detail {

/// FNV-1a, 64 bits: a fixed hash (std::hash differs between standard libraries).
constexpr std::uint64_t fnv1a_64(std::string_view bytes, std::uint64_t hash = 14695981039346656037ull) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

/// The offset of tick `tick` of schedule `name`: FNV-1a 64 of `<name>@<tick, decimal ms>` mod
/// `jitter` (in [0, jitter); 0 when jitter is 0).
inline std::chrono::milliseconds jitter_offset(std::string_view name,
                                               std::chrono::system_clock::time_point tick,
                                               std::chrono::milliseconds jitter) {
  if (jitter.count() <= 0) return std::chrono::milliseconds(0);
  const std::uint64_t hash = fnv1a_64(std::to_string(unix_ms(tick)), fnv1a_64("@", fnv1a_64(name)));
  return std::chrono::milliseconds(
      static_cast<std::int64_t>(hash % static_cast<std::uint64_t>(jitter.count())));
}

}  // namespace streamq::detail
