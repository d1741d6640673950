// SPDX-License-Identifier: MIT
// The lease keeper: a duty that renews, every heartbeat_interval, the lease of
// every entry this consumer holds (owner-checked XCLAIM ... IDLE 0 JUSTID), so no reclaimer
// takes an entry whose worker is alive. What the renewal finds wrong it reports to the
// in-flight set: entries another consumer owns now are marked lost (not run); entries whose
// body was deleted go to the completer as orphan records, which put the fields this consumer
// read into the dead-letter stream. At exit, release() hands entries that never started back
// to the group at once. Runs on the duty thread; release() on the caller's.
#pragma once

#include <string>
#include <vector>

#include "duties.hpp"

namespace streamq::detail {

/// Entries of `stream` found with their body deleted while held: each still held becomes one
/// orphan completion (its dead-letter record, with the fields this consumer read).
void report_gone(Shared& s, std::uint16_t stream, const std::vector<std::string>& ids);

/// An operator cancelled these entries of `stream` (their cancel requests exist): a held one
/// whose handler runs is asked to stop (and given up timeout_grace later), one not started yet
/// will not start. Entries not held are left alone. Called by the lease renewal and the cancel
/// follower.
void ask_cancelled(Shared& s, std::uint16_t stream, const std::vector<std::string>& ids);

class LeaseKeeper final : public Duty {
 public:
  explicit LeaseKeeper(Shared& shared);
  std::string_view name() const noexcept override { return "lease keeper"; }
  Clock::time_point next() const override { return next_; }
  void tick(ScriptRunner& scripts, Clock::time_point now) override;
  bool during_shutdown() const noexcept override { return true; }

  /// Releases every held entry that never started: its idle time is set far in the past, so
  /// any reclaimer takes it at once, and one delivered fresh gets its delivery count back to
  /// 0 (it never ran). Entries whose handler started are left alone: they may still be
  /// running, so they wait out claim_min_idle as if this consumer had crashed.
  static void release(Shared& s, ScriptRunner& scripts);

 private:
  Shared& s_;
  Clock::time_point next_;
};

}  // namespace streamq::detail
