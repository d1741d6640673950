// SPDX-License-Identifier: MIT
// Builds the Task a handler sees from a stream entry: Task's constructor is not public API.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>

#include "streamq/task.hpp"

namespace streamq::detail {

struct TaskFactory {
  /// A task of the entry `entry_id` with `fields`; its payload (the `payload` field, already
  /// validated as JSON) is parsed on the first Task::json() call. `stop` is the worker's stop
  /// token (see Task::stop_requested()); a default token never stops.
  static Task make(std::string entry_id, std::shared_ptr<const Fields> fields, std::int64_t deliveries,
                   std::chrono::system_clock::time_point created_at, int retry_count, int max_retries,
                   std::stop_token stop = {});
};

}  // namespace streamq::detail
