// SPDX-License-Identifier: MIT
// The courier of a partitioned queue's flows: carries what a partition's outbox
// (<partition>:flow:outbox, see the flows across partitions in src/lua/lib/track.lua) holds
// for another partition:
//   settle  the end of a flow's child, to its parent's partition (flow_apply.lua);
//   place   a flow's children, from the partition their flow was written to (the home, where
//           the parents are), to their own (enqueue.lua, 'placed'), when the producer that
//           wrote the flow did not place them itself (it died, or the partition was out of
//           reach).
// An entry is deleted once its call answered without an error: carried at least once. Both
// calls are idempotent (a child applied once, a placement made once), so any number of
// consumers carry an outbox at once. A call that fails leaves its entry for a later pass (the
// pass throws its error once the others are carried: the duty runner logs it and backs off).
// Runs in each partition's forwarder pass (forwarder.hpp). Talks to: Redis only.
#pragma once

#include <cstdint>
#include <string>

#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

class FlowCourier {
 public:
  /// Most entries one pass carries (pipelined: one round trip for all of them).
  static constexpr std::int64_t kMostPerPass = 200;

  explicit FlowCourier(Shared& shared) : s_(shared) {}
  /// Whether the consumer's queue is partitioned (else no outbox is ever written).
  static bool needed(const Shared& shared) { return shared.queue != shared.opt.stream; }
  /// One pass over the outbox. Returns how many entries it read (kMostPerPass: more may wait).
  /// Throws ConnectionError / ReplyError when the outbox cannot be read, or an entry's call failed.
  std::int64_t pass(ScriptRunner& scripts);

 private:
  Shared& s_;
};

}  // namespace streamq::detail
