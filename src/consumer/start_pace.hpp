// SPDX-License-Identifier: MIT
// How many delivered but unstarted entries a consumer keeps: about kHorizon of its handlers'
// recent start rate, so a worker of long tasks holds little beyond what its handlers run
// (another worker takes the rest from the stream) while one of short tasks reads in batches up
// to its prefetch.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>

namespace streamq::detail {

class StartPace {
 public:
  using Clock = std::chrono::steady_clock;
  /// The work an unstarted entry should wait here at most, at the measured rate.
  static constexpr std::chrono::milliseconds kHorizon{10};
  /// Starts are counted over windows of this length.
  static constexpr std::chrono::milliseconds kWindow{5};

  /// `most`: the prefetch, which also bounds what is kept unstarted.
  explicit StartPace(std::size_t most) : most_(std::max<std::size_t>(1, most)) {}

  /// A handler took an entry at `now`.
  void started(Clock::time_point now) {
    ++starts_;
    refresh(now);
  }

  /// Ends the window if it is over. The first window, and one that spanned an idle spell, is
  /// weighed in whole, so a worker that was idle asks for little until its handlers show their
  /// pace again; otherwise windows are averaged.
  void refresh(Clock::time_point now) {
    if (since_ == Clock::time_point{}) {
      since_ = now;
      return;
    }
    const auto elapsed = now - since_;
    if (elapsed < kWindow) return;
    const double seconds = std::chrono::duration<double>(elapsed).count();
    const double sample = static_cast<double>(starts_) / seconds;
    rate_ = !measured_ || elapsed >= 4 * kWindow ? sample : (rate_ + sample) / 2;
    measured_ = true;
    starts_ = 0;
    since_ = now;
    const double want = std::ceil(rate_ * std::chrono::duration<double>(kHorizon).count());
    cap_ =
        want >= static_cast<double>(most_) ? most_ : std::max<std::size_t>(1, static_cast<std::size_t>(want));
  }

  /// Most entries to keep delivered but unstarted for the busy handlers: 1 to the prefetch.
  std::size_t cap() const { return cap_; }

  /// Whether a read is worth sending with `waiting` entries unstarted (or on their way) when
  /// `allowed` may wait: at least half of it is free, so reads stay whole batches.
  static bool worth_reading(std::size_t waiting, std::size_t allowed) {
    return waiting + std::max<std::size_t>(1, allowed / 2) <= allowed;
  }

 private:
  const std::size_t most_;
  std::size_t cap_ = 1;  // nothing measured yet: no hoard before the handlers show their pace
  std::size_t starts_ = 0;
  double rate_ = 0;  // starts per second
  bool measured_ = false;
  Clock::time_point since_{};
};

}  // namespace streamq::detail
