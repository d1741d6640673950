// SPDX-License-Identifier: MIT
// A clock the test sets, for the Scheduler's (and Schedules') `clock` option.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace streamq::test {

/// Shared by every Scheduler of a test: set() moves all of them.
class FakeClock {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  explicit FakeClock(TimePoint t) : now_(std::make_shared<std::atomic<std::int64_t>>(ticks(t))) {}
  void set(TimePoint t) { now_->store(ticks(t)); }
  TimePoint now() const { return TimePoint(std::chrono::system_clock::duration(now_->load())); }
  std::function<TimePoint()> fn() const {
    return [now = now_] { return TimePoint(std::chrono::system_clock::duration(now->load())); };
  }

 private:
  static std::int64_t ticks(TimePoint t) { return t.time_since_epoch().count(); }
  std::shared_ptr<std::atomic<std::int64_t>> now_;
};

}  // namespace streamq::test
