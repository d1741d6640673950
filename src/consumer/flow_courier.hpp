// SPDX-License-Identifier: MIT
// The courier of flows across partitions and queues (see the flows across partitions in
// src/lua/lib/flows.lua and src/lua/enqueue.lua). Per partition (a queue of one partition is
// its own), it carries:
//   the ends of this partition's children whose parents live elsewhere (another partition of
//   the queue, or another queue), from the stream <partition>:flows:outbox to the parent's
//   partition (flow_apply.lua), in order;
//   the placements of this partition's flows' children elsewhere (<partition>:flows:placing, a
//   hash), made there (enqueue.lua, 'placed') when the producer that wrote the flow did not
//   take them out of the hash within kPlacementGraceMs (it died, or a partition was out of its
//   reach).
// An entry is deleted once its call answered without an error: carried at least once. Both
// calls are idempotent (a child's end applied once, a placement made once: its guard), so any
// number of consumers carry a partition's at once. A call that fails leaves its entry for a
// later pass; the pass goes on past it, and says what failed (a partition out of reach fails
// every call of the pass: they all wait for a later one).
// Runs in each partition's forwarder pass (forwarder.hpp). Talks to: Redis only.
#pragma once

#include <cstdint>
#include <string>

#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

class FlowCourier {
 public:
  /// Most outbox entries, and about as many placements, one pass carries (pipelined).
  static constexpr std::int64_t kMostPerPass = 200;

  /// What a pass did.
  struct Pass {
    std::int64_t read = 0;     // outbox entries read (kMostPerPass: more may wait)
    std::int64_t carried = 0;  // entries and placements carried
    std::string failed;        // the first call that failed, with its error ("" when none did)
  };

  explicit FlowCourier(Shared& shared) : s_(shared) {}
  /// One pass over the outbox and the placements. Throws ConnectionError / ReplyError when
  /// they cannot be read.
  Pass pass(ScriptRunner& scripts);

 private:
  Shared& s_;
  std::string after_ = "-";           // where the next outbox read starts (after a full one)
  std::string placing_cursor_ = "0";  // HSCAN's cursor over the placements
};

}  // namespace streamq::detail
