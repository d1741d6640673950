// SPDX-License-Identifier: MIT
// The stats snapshot on a caller's connection (StatsReader owns one; the Inspector shares its own).
#pragma once

#include "connection.hpp"
#include "streamq/stats.hpp"

namespace streamq::detail {

/// StatsReader::read() on `conn` (connected or not) for `options` (validated).
QueueStats read_queue_stats(Connection& conn, const StatsOptions& options);

}  // namespace streamq::detail
