// SPDX-License-Identifier: MIT
// The wire format: task entries in and out, timestamps, ids, payload guards.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <variant>

#include "redis/connection.hpp"
#include "streamq/common.hpp"
#include "streamq/task.hpp"

namespace streamq::detail {

using TimePoint = std::chrono::system_clock::time_point;

/// `2026-11-29T18:00:00.123456` (UTC, microseconds, no zone), as Python's
/// datetime.utcnow().isoformat() writes it.
std::string format_timestamp(TimePoint t);
/// Accepts `YYYY-MM-DDTHH:MM:SS[.f{1,9}][Z|±HH:MM|±HHMM]` (also a space instead of `T`).
std::optional<TimePoint> parse_timestamp(std::string_view text);

/// A random UUID v4 in its 36-character text form.
std::string new_uuid_v4();

/// Why a payload is refused, or nullopt when it is fine: size, depth, then syntax.
std::optional<std::string> payload_problem(std::string_view json, std::size_t max_bytes, int max_depth);

/// Parses a non-negative decimal integer (no sign, no spaces); nullopt otherwise.
std::optional<int> parse_count(std::string_view text);

/// A task about to be written.
struct NewTask {
  std::string_view task_id;
  std::string_view task_type;
  std::string_view payload;
  std::string_view created_at;  // format_timestamp() text, shared by a batch
  int max_retries = 3;
  const std::vector<std::pair<std::string, std::string>>* extra_fields = nullptr;
  std::string_view unique_key{};       // written as the unique_key field when not empty
  std::string_view retention{};        // written as the retention field when not empty (a tracked task)
  std::string_view deadline{};         // written as the deadline field when not empty
  std::string_view flow_parent{};      // a flow's child: its parent's id, written when not empty,
  std::string_view flow_on_failure{};  // with what its failure does to it,
  std::string_view flow_home{};        // and, in another partition than its parent, the parent's
  std::string_view flow_queue{};       // a stub of a child in another queue: that queue (never written)
  std::string_view batch_id{};         // its batch (EnqueueOptions::batch), written when not empty
  std::string_view tenant{};           // its tenant (EnqueueOptions::tenant), written when not empty
};

/// The field of a flow's stub (enqueue.lua's dest 0: the home's call lists a child placed
/// elsewhere) that names the other queue the child goes to (FlowNode::queue). A stub is written
/// nowhere: this field is in no entry.
inline constexpr std::string_view flow_queue_field = "flow_queue";

/// The retention field of a tracked task: "<done ms> <dead ms>" (dead -1: as long as its dead
/// letter). @throws ConfigError for a negative or overlong duration.
std::string retention_field(const Retention& r);

/// Appends the task's field/value strings to `argv` in the seed's order (task_id, task_type,
/// payload, created_at, max_retries, retry_count, then unique_key, retention and deadline if any, then
/// extras) and returns how many strings were added. The views must outlive the command.
std::size_t append_new_task(Argv& argv, const NewTask& task);

/// The next `<length>:<bytes>` of `text` from `at` on (a flow's lists: a parent's
/// flow_children field and record field), moving `at` past it; nullopt when there is none
/// there (malformed: not written by streamq).
std::optional<std::string_view> take_counted(std::string_view text, std::size_t& at);
/// A flow's children as they ended, from a parent's flow_children field (or a group's result):
/// per child `<length>:<id><length>:<outcome>`. @throws std::runtime_error when malformed.
std::vector<ChildResult> parse_children(std::string_view text);
/// Appends `<length>:<bytes>` of `s` to `out` (what take_counted reads back).
void append_counted(std::string& out, std::string_view s);

/// How many strings append_new_task adds for `task`.
inline std::size_t new_task_string_count(const NewTask& task) {
  return 12 + (task.extra_fields != nullptr ? 2 * task.extra_fields->size() : 0) +
         (task.unique_key.empty() ? 0 : 2) + (task.retention.empty() ? 0 : 2) +
         (task.deadline.empty() ? 0 : 2) + (task.flow_parent.empty() ? 0 : 4) +
         (task.flow_home.empty() ? 0 : 2) + (task.flow_queue.empty() ? 0 : 2) +
         (task.batch_id.empty() ? 0 : 2) + (task.tenant.empty() ? 0 : 2);
}

/// Most fields a runnable entry may have, and a dead-letter entry keeps: Lua's unpack() cannot
/// pass the ~8,000 values one XADD of more would take. The scripts get it as an argument.
inline constexpr std::size_t kMaxFields = 1000;

/// The fields of a task entry, in the seed's order.
inline constexpr std::string_view task_fields[] = {field::task_id,    field::task_type,   field::payload,
                                                   field::created_at, field::max_retries, field::retry_count,
                                                   field::last_error};
/// The fields a dead-letter entry sets itself (written by src/lua/lib/fate.lua, which also
/// names them: a unit test checks that the two lists agree).
inline constexpr std::string_view dead_letter_fields[] = {field::error, field::failed_at, field::original_id,
                                                          field::consumer, field::reason};

/// True for the field names the wire format and the dead-letter stream reserve.
bool is_reserved_field(std::string_view name) noexcept;

/// Limits the decoder enforces on untrusted entries.
struct DecodeLimits {
  std::size_t max_payload_bytes = 1 << 20;
  int max_payload_depth = 64;
  int default_max_retries = 3;
};

/// A decoded task, or the reason it cannot run (the entry then goes to the dead-letter stream).
using Decoded = std::variant<Task, std::string>;

/// Validates and decodes one entry. Never throws for bad input: every problem becomes a reason.
/// The Task shares `fields` (the dead-letter entry of a refused one keeps the raw bytes).
Decoded decode_task(std::string entry_id, std::shared_ptr<const Fields> fields, std::int64_t deliveries,
                    const DecodeLimits& limits, std::stop_token stop = {});

}  // namespace streamq::detail
