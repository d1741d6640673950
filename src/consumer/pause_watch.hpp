// SPDX-License-Identifier: MIT
// The pause flag of a queue as this consumer sees it (PauseFlag, in Shared) and the duty runner
// duty that keeps it current (PauseWatch): one EXISTS of `<stream>:paused` every
// pause_check_interval. While paused the fetcher reads no new entries (it still writes the
// acknowledgements of finished ones) and the reclaimer takes none over.
#pragma once

#include <condition_variable>
#include <mutex>
#include <stop_token>

#include "duties.hpp"

namespace streamq::detail {

class PauseWatch final : public Duty {
 public:
  /// The consumer's set-up read the flag once (check_paused): the first tick is an interval later.
  explicit PauseWatch(Shared& shared) : s_(shared), next_(Clock::now() + shared.opt.pause_check_interval) {}
  std::string_view name() const noexcept override { return "pause watch"; }
  Clock::time_point next() const override { return next_; }
  void tick(ScriptRunner& scripts, Clock::time_point now) override;

 private:
  Shared& s_;
  Clock::time_point next_;
};

/// Reads the pause flag once (EXISTS) and records it in `s.pause`.
void check_paused(Shared& s, Connection& conn);

}  // namespace streamq::detail
