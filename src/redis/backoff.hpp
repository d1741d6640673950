// SPDX-License-Identifier: MIT
// Reconnect backoff: exponential with full jitter.
#pragma once

#include <chrono>
#include <random>

namespace streamq::detail {

using Millis = std::chrono::milliseconds;

/// Defaults of ConnectionOptions::backoff_max (0): where a caller waits, and for a Consumer.
inline constexpr Millis kCallerBackoffMax{2000};
inline constexpr Millis kConsumerBackoffMax{30000};

/// Exponential backoff with full jitter: after n consecutive failures the next attempt waits
/// a uniformly random time in [0, min(max, base * 2^n)]; 0 when nothing failed.
class Backoff {
 public:
  Backoff(Millis base, Millis max);
  void fail() noexcept { ++failures_; }
  void reset() noexcept { failures_ = 0; }
  int failures() const noexcept { return failures_; }
  Millis delay();

 private:
  Millis base_;
  Millis max_;
  int failures_ = 0;
  std::minstd_rand rng_;
};

}  // namespace streamq::detail
