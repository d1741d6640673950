// SPDX-License-Identifier: MIT
#include "reclaimer.hpp"

#include <algorithm>

#include "log.hpp"
#include "orphan_records.hpp"
#include "pending.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

constexpr Millis kReclaimSoon{50};  // next pass when more may wait, or there was no room

}  // namespace

void Reclaimer::tick(ScriptRunner& scripts, Clock::time_point now) {
  const Millis soon = std::min(kReclaimSoon, s_.opt.reclaim_interval);
  if (s_.pause.paused()) {  // a paused queue's stalled entries wait for the resume too
    next_ = now + s_.opt.reclaim_interval;
    return;
  }
  // The provisional records of holders that are gone are their tasks' fate now.
  for (std::uint16_t level = 0; level < s_.stream_count(); ++level) settle_orphan_records(s_, scripts, level);
  const std::size_t room = s_.inflight.reclaim_room(static_cast<std::size_t>(s_.opt.concurrency));
  if (room == 0) {
    next_ = now + soon;
    return;
  }
  // Every level, the most important first: one bounded step each, within the room left.
  bool more = false;
  std::size_t left = room;
  for (std::uint16_t level = 0; level < s_.stream_count(); ++level) {
    std::string& cursor = cursors_[level];
    if (left == 0) {
      more = true;
      break;
    }
    PendingBatch batch;
    try {
      batch = fetch_pending(s_, scripts, level, PendingMode::reclaim, cursor, left);
    } catch (const ReplyError& e) {
      // One level's group is gone (its stream was deleted): the fetcher recreates it; the
      // other levels are still reclaimed meanwhile.
      if (e.prefix() != "NOGROUP") throw;
      cursor = "0-0";
      continue;
    }
    if (const std::size_t n = s_.inflight.deliver(batch.works); n > 0) {
      Metrics::add(s_.metrics.reclaimed, n);
      log(LogLevel::info, "reclaimed " + std::to_string(n) + " stalled entries of " + s_.keys(level).stream);
      left -= std::min(left, n);
    }
    cursor = std::move(batch.cursor);
    more = more || cursor != "0-0";
  }
  next_ = now + (more ? soon : s_.opt.reclaim_interval);
}

}  // namespace streamq::detail
