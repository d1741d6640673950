// SPDX-License-Identifier: MIT
// Test support: UTC time points written as calendar dates, for the schedule tests.
#pragma once

#include <chrono>

namespace streamq::test {

/// y-mo-d h:mi:s UTC.
inline std::chrono::system_clock::time_point at(int y, unsigned mo, unsigned d, int h = 0, int mi = 0,
                                                int s = 0) {
  using namespace std::chrono;
  return sys_days(year(y) / month(mo) / day(d)) + hours(h) + minutes(mi) + seconds(s);
}

}  // namespace streamq::test
