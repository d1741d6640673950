// SPDX-License-Identifier: MIT
// The janitor: a duty that removes consumers of the group that have been idle for
// idle_consumer_timeout and hold no pending entry (every restart under a new name leaves one
// behind). The check and the XGROUP DELCONSUMER are one script: DELCONSUMER drops a
// consumer's pending entries, so it must never run on one that holds any. Runs at start and
// then every min(idle_consumer_timeout / 4, 5 min), on the duty thread.
#pragma once

#include "duties.hpp"

namespace streamq::detail {

class Janitor final : public Duty {
 public:
  explicit Janitor(Shared& shared);
  std::string_view name() const noexcept override { return "janitor"; }
  Clock::time_point next() const override { return next_; }
  void tick(ScriptRunner& scripts, Clock::time_point now) override;

  /// The interval for a given idle timeout.
  static Millis interval(Millis idle_consumer_timeout);

 private:
  Shared& s_;
  Clock::time_point next_;
};

}  // namespace streamq::detail
