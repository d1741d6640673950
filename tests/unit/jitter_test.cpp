// SPDX-License-Identifier: MIT
// ScheduledTaskOptions::jitter's offsets: a fixed hash, so that every instance on every platform
// computes the same (the values here were computed independently, in Python).
#include <chrono>

#include <gtest/gtest.h>

#include "scheduler/jitter.hpp"
#include "utc_time.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono;

TEST(Jitter, Fnv1a64MatchesTheReferenceValues) {
  EXPECT_EQ(detail::fnv1a_64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(detail::fnv1a_64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(detail::fnv1a_64("foobar"), 0x85944171f73967e8ull);
}

TEST(Jitter, TheOffsetIsTheHashOfNameAndTickModTheJitter) {
  // FNV-1a 64 of "nightly@1767232800000" mod 30000, and of the next day's tick.
  EXPECT_EQ(detail::jitter_offset("nightly", at(2026, 1, 1, 2), seconds(30)), milliseconds(10512));
  EXPECT_EQ(detail::jitter_offset("nightly", at(2026, 1, 2, 2), seconds(30)), milliseconds(8234));
  EXPECT_EQ(detail::jitter_offset("nightly", at(2026, 1, 1, 2), milliseconds(0)), milliseconds(0));
  for (int day = 1; day <= 28; ++day) {
    const milliseconds offset = detail::jitter_offset("nightly", at(2026, 2, day, 2), seconds(30));
    EXPECT_GE(offset, milliseconds(0));
    EXPECT_LT(offset, seconds(30));
  }
}

}  // namespace
}  // namespace streamq::test
