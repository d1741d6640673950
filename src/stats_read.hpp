// SPDX-License-Identifier: MIT
// The stats snapshot on a caller's connection (StatsReader owns one; the Inspector shares its own).
#pragma once

#include <string>
#include <vector>

#include "connection.hpp"
#include "streamq/stats.hpp"

namespace streamq::detail {

/// StatsReader::read() on `conn` (connected or not) for `options` (validated).
QueueStats read_queue_stats(Connection& conn, const StatsOptions& options);

/// The stats of a queue made of several streams (its partitions), named `queue`: their sum (see
/// QueueStats for how each number combines).
QueueStats sum_partitions(const std::string& queue, std::vector<QueueStats> parts);

}  // namespace streamq::detail
