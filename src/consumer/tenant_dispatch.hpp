// SPDX-License-Identifier: MIT
// The fetcher's part in fair queues per tenant (docs/tenants.md): ahead of each read, one call
// of tenants_dispatch.lua moves as many tasks as the read may bring from the backlogs of the
// tenants whose turn it is into the queue's streams; the read then takes them as any entries.
// Talks to: Redis (through the fetcher's pipeline).
#pragma once

#include <chrono>
#include <cstddef>

#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

class TenantDispatch {
 public:
  TenantDispatch(const Shared& s, ScriptRunner& scripts) : s_(s), scripts_(scripts) {}

  /// Whether the read about to be sent is preceded by a dispatch: every read while the last
  /// dispatch saw tenants ready or waiting; else one read in kPoll (a queue without tenants
  /// pays one script call per 50 ms, not one per read; a tenant that has work then is seen
  /// within it); never once the server said this worker's ACL user may not run it (said once,
  /// as a warning; the queue goes on without tenants: a user given the grants later needs a
  /// restart of the worker).
  bool wanted(std::chrono::steady_clock::time_point now) const noexcept {
    return !off_ && (active_ || next_due_ms_ >= 0 || now - last_call_ >= kPoll);
  }
  /// The dispatch of up to `count` tasks, to send ahead of a read of `count` entries.
  Argv call(std::size_t count);
  /// Reads what the dispatch sent by call() did (its reply is next on the connection). Another
  /// error than NOPERM is logged (at most once a minute: the tasks that name no tenant go on),
  /// never thrown.
  void read_reply(Connection& conn);
  /// How long a blocking read may wait: the consumer's `block`, at most kPoll while tenants
  /// have work (a tenant made ready while the workers block is seen within it) or when the
  /// read goes without a dispatch (`dispatched` false, as wanted() said: the next one is due
  /// kPoll after the last), and no longer than until the first waiting tenant is due (a rate
  /// window that opens, a slot's lease that ends).
  Millis block_for(Millis block, bool dispatched) const;
  static constexpr Millis kPoll{50};

 private:
  const Shared& s_;
  ScriptRunner& scripts_;
  long long next_due_ms_ = -1;  // from the last reply: -1 when no tenant waits
  bool active_ = false;         // from the last reply: whether any tenant is ready or waiting
  bool off_ = false;
  std::chrono::steady_clock::time_point last_call_{};
  bool eval_next_ = false;  // the last call was answered NOSCRIPT
  std::chrono::steady_clock::time_point last_error_log_{};
};

}  // namespace streamq::detail
