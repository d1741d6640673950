// SPDX-License-Identifier: MIT
// Reading what lib/record.lua and lib/settle.lua write: a tracked task's record (a hash) and the entries of a
// queue's events stream.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redis/reply.hpp"
#include "streamq/record.hpp"

namespace streamq::detail {

/// The record held in the hash `v` (an HGETALL reply) of task `task_id` of `queue`; nullopt
/// when the hash is empty (no such record). Fields it does not know are ignored.
std::optional<TaskRecord> parse_record(const ReplyView& v, std::string_view task_id,
                                       const std::string& queue);

/// A parent's children in other queues, by child id, from its record's flow_queues field
/// (`<length>:<id><length>:<queue>` each, enqueue.lua); what cannot be read ends it.
std::map<std::string, std::string> parse_child_queues(std::string_view text);

/// One events stream entry (an element of an XRANGE/XREAD reply: [id, [field, value, ...]]).
QueueEvent parse_event(const ReplyView& entry, const std::string& queue);

/// Whether an event ends its task (done, dead, cancelled).
bool is_final_event(std::string_view event) noexcept;

}  // namespace streamq::detail
