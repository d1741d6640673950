// SPDX-License-Identifier: MIT
// The reclaimer: a duty that takes over entries whose consumer stalled (pending and
// idle for claim_min_idle or longer, i.e. no heartbeat renewed them), every reclaim_interval
// and sooner while more may wait. It walks the group's pending list of every priority level
// (the most important first) with a cursor per level, so each call is bounded; first, each pass ends the
// tasks whose provisional dead-letter records lost their holder (orphan_records.hpp); entries whose body is
// gone or that were started max_deliveries times are dead-lettered by the same script instead of being run.
// Reclaimed entries are suspects (see InFlight::last_chance): it takes at most `concurrency` of them, and
// none while earlier ones still wait. It starts only after the fetcher's first replay of this consumer's own
// entries, or both would fetch what a previous run under this name left. Runs on the duty thread; talks to
// the in-flight set and Redis.
#pragma once

#include <array>
#include <atomic>
#include <string>

#include "duties.hpp"

namespace streamq::detail {

class Reclaimer final : public Duty {
 public:
  explicit Reclaimer(Shared& shared) : s_(shared) {}
  std::string_view name() const noexcept override { return "reclaimer"; }
  Clock::time_point next() const override { return armed_.load() ? next_ : Clock::time_point::max(); }
  void tick(ScriptRunner& scripts, Clock::time_point now) override;

  /// The fetcher's first replay is done: reclaiming may start (call DutyRunner::wake()).
  void arm() noexcept { armed_.store(true); }

 private:
  Shared& s_;
  std::atomic<bool> armed_{false};
  Clock::time_point next_{};  // due at once when armed
  std::array<std::string, kLevels> cursors_{"0-0", "0-0", "0-0"};
};

}  // namespace streamq::detail
