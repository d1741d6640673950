// SPDX-License-Identifier: MIT
// The stats snapshot on a caller's connection (StatsReader owns one; the Inspector shares its own).
#pragma once

#include <string>
#include <vector>

#include "redis/connection.hpp"
#include "streamq/stats.hpp"

namespace streamq::detail {

/// StatsReader::read() on `conn` (connected or not) for `options` (validated).
QueueStats read_queue_stats(Connection& conn, const StatsOptions& options);

/// What read_queue_stats makes of the replies of its two pipelines (`first`: 14 replies;
/// `per_group`: two per group found), without a connection: for the fuzz target. Throws
/// streamq::Error for replies of another shape or count, or numbers no server sends.
QueueStats parse_queue_stats(const StatsOptions& options, const std::vector<Reply>& first,
                             const std::vector<Reply>& per_group);

/// The stats of a queue made of several streams (its partitions), named `queue`: their sum (see
/// QueueStats for how each number combines).
QueueStats sum_partitions(const std::string& queue, std::vector<QueueStats> parts);

/// Sets the deprecated total_length and total_pending to length and pending_total.
void fill_deprecated_totals(QueueStats& stats);

}  // namespace streamq::detail
