// SPDX-License-Identifier: MIT
#include "reclaimer.hpp"

#include <algorithm>

#include "log.hpp"
#include "pending.hpp"

namespace streamq::detail {
namespace {

constexpr Millis kReclaimSoon{50};  // next pass when more may wait, or there was no room

}  // namespace

void Reclaimer::tick(ScriptRunner& scripts, Clock::time_point now) {
  const Millis soon = std::min(kReclaimSoon, s_.opt.reclaim_interval);
  const std::size_t room = s_.inflight.reclaim_room(static_cast<std::size_t>(s_.opt.concurrency));
  if (room == 0) {
    next_ = now + soon;
    return;
  }
  PendingBatch batch = fetch_pending(s_, scripts, PendingMode::reclaim, cursor_, room);
  if (const std::size_t n = s_.inflight.deliver(batch.works); n > 0) {
    Metrics::add(s_.metrics.reclaimed, n);
    log(LogLevel::info, "reclaimed " + std::to_string(n) + " stalled entries of " + s_.keys().stream);
  }
  cursor_ = std::move(batch.cursor);
  next_ = now + (cursor_ != "0-0" ? soon : s_.opt.reclaim_interval);
}

}  // namespace streamq::detail
