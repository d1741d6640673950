// SPDX-License-Identifier: MIT
// The forwarder: a duty, on a duty runner of its own (so a long reclaim pass never delays a due
// task), that moves the queue's delayed tasks to their streams when due: delayed enqueues
// (EnqueueOptions::delay/run_at), delayed retries and rate-limited tasks put back. One forward
// script per pass moves at most kMostPerPass (removed from the set and added to their streams
// in that one script), so any number of forwarders run at once without duplicates or losses. Due times are
// the server's clock; the script also says how long until the next task is due, and the next pass is then (or
// at forward_interval, whichever is sooner) while this consumer holds the queue's forwarder lease, and once a
// second otherwise: one consumer polls often, the rest stand by. Each pass also runs the flow
// courier over the partition's outbox and placements (flow_courier.hpp). Talks to:
// Redis only.
#pragma once

#include <atomic>

#include "duties.hpp"
#include "flow_courier.hpp"

namespace streamq::detail {

class Forwarder final : public Duty {
 public:
  /// Most tasks one pass moves: large enough for >= 50,000 tasks/s, small enough that one
  /// pass holds the server for only a few ms (about 6 ms on a slow 2-core machine).
  static constexpr std::int64_t kMostPerPass = 500;
  /// How often a consumer without the lease polls, and how long a lease lasts unrenewed, at
  /// least (both grow with a forward_interval that is longer, so the holder always renews in
  /// time and the standbys never poll more often than it).
  static constexpr Millis kStandbyInterval{1000};
  static constexpr Millis kLease{3000};

  explicit Forwarder(Shared& shared);
  std::string_view name() const noexcept override { return "forwarder"; }
  Clock::time_point next() const override { return poked_.load() ? Clock::time_point::min() : next_; }
  /// Due at once (any thread; then DutyRunner::wake): an outbox entry was just written.
  void poke() noexcept { poked_.store(true); }
  void tick(ScriptRunner& scripts, Clock::time_point now) override;

 private:
  static constexpr Millis kCourierLogEvery{10000};
  /// The flow courier's pass; whether another should follow at once. Its errors stay here (the
  /// forwarding goes on): logged once in a while; a refusal by the ACL (a worker user without
  /// the courier's grants) turns the courier off, with a warning. ConnectionError goes on up.
  bool carry(ScriptRunner& scripts, Clock::time_point now);

  Shared& s_;
  const Millis standby_interval_;
  const Millis lease_;
  Clock::time_point next_;
  FlowCourier courier_;
  std::atomic<bool> poked_{false};
  Clock::time_point quiet_until_{};  // the courier's next failure is logged from then on
  bool courier_off_ = false;         // its ACL user may not run it
};

}  // namespace streamq::detail
