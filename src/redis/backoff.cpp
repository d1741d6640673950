// SPDX-License-Identifier: MIT
#include "backoff.hpp"

#include <algorithm>
#include <cstdint>

namespace streamq::detail {

Backoff::Backoff(Millis base, Millis max) : base_(base), max_(max), rng_(std::random_device{}()) {}

Millis Backoff::delay() {
  if (failures_ == 0) return Millis{0};
  // base * 2^failures, saturating at max (no shift overflow however many failures).
  std::int64_t cap = base_.count();
  for (int i = 0; i < failures_ && cap < max_.count(); ++i) cap *= 2;
  cap = std::min<std::int64_t>(cap, max_.count());
  std::uniform_int_distribution<std::int64_t> dist(0, cap);
  return Millis{dist(rng_)};
}

}  // namespace streamq::detail
