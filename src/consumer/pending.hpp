// SPDX-License-Identifier: MIT
// Taking pending entries to run, for the fetcher (replay of this consumer's own entries after
// a start or reconnect) and the reclaimer (entries of consumers that stalled): one call of
// the fetch_pending script, and the reading of stream entries out of replies. Runs on the
// caller's thread and connection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "redis/reply.hpp"
#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

/// Reads one [id, [f1, v1, ...] or nil] stream entry. A nil, odd or non-string field list
/// gives a Work without fields (it is then dead-lettered, never run).
Work read_entry(ReplyView entry, std::uint16_t stream, std::int64_t deliveries, Origin origin);

enum class PendingMode { own, reclaim };

struct PendingBatch {
  std::vector<Work> works;
  std::string cursor;     // where the next call goes on; "0-0" once the end was reached
  std::int64_t dead = 0;  // dead-lettered by the script (body lost, too many deliveries)
};

/// Takes up to `count` pending entries of level `stream` after `cursor` ("0-0" = from the
/// start), never one this consumer holds now. Entries it dead-letters go to the queue's
/// dead-letter stream, whatever their level. Throws ConnectionError / ReplyError.
PendingBatch fetch_pending(Shared& s, ScriptRunner& scripts, std::uint16_t stream, PendingMode mode,
                           const std::string& cursor, std::size_t count);

}  // namespace streamq::detail
