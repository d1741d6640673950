// SPDX-License-Identifier: MIT
// The name lock (R15 of the reliability research): two live processes started with the same
// consumer_name would share one pending entries list, each taking the other's entries for its
// own after a restart, without a word. So a consumer holds its name in a key of the queue,
// live_key() (`<stream>:live:<group length>:<group>:<consumer>`), holding "<client id>
// <token>": the Redis client id of the connection that renews it and a token of this run. It
// is written at start, renewed with the leases (every heartbeat_interval), lives for
// claim_min_idle after its last renewal, and is deleted at a clean stop.
// - A start that finds the name held by a live client (CLIENT LIST ID) throws ConfigError.
// - A start that finds it held by a client that is gone (its process crashed or was killed:
//   the server closed its connection) takes the name at once.
// - A holder that finds, when renewing, that another process took its name (it was stopped or
//   cut off for longer than claim_min_idle) stops its consumer, whose run() then throws
//   ConfigError: two processes never go on sharing a name.
// - A user whose ACL does not reach the key (set up before it existed) runs without the
//   check, with a warning that says what to grant.
// A duty of partition 0's scheduler (during shutdown too). Talks to: Redis only.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "scheduler.hpp"

namespace streamq::detail {

class NameLock final : public Duty {
 public:
  /// `on_lost` runs on the scheduler thread when another process took the name.
  NameLock(Shared& shared, std::function<void()> on_lost);

  /// At start, on a connected `conn`: takes the name, or throws ConfigError when a live
  /// process holds it.
  void claim(Connection& conn);
  /// At the end of a clean stop: deletes the key if it is still this run's. Never throws.
  void release(Connection& conn) noexcept;
  /// Whether another process took the name while this one ran.
  bool lost() const noexcept { return lost_.load(); }
  /// The message run() throws when lost().
  std::string lost_message() const;

  std::string_view name() const noexcept override { return "name lock"; }
  Clock::time_point next() const override { return next_; }
  void tick(ScriptRunner& scripts, Clock::time_point now) override;
  bool during_shutdown() const noexcept override { return true; }

 private:
  /// Runs the name script; returns the holder's value, or "" when done.
  std::string call(ScriptRunner& scripts, const char* mode, const std::string& value,
                   const std::string& found = {});
  std::string value_for(const Connection& conn) const;

  Shared& s_;
  const std::string key_;
  const std::string token_;
  std::function<void()> on_lost_;
  Clock::time_point next_{};
  bool held_ = false;  // claimed (false: not yet, or the ACL user cannot reach the key)
  std::atomic<bool> lost_{false};
  std::string taken_by_;  // written before lost_ is set
};

}  // namespace streamq::detail
