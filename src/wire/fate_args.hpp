// SPDX-License-Identifier: MIT
// The arguments the scripts that end an attempt take (src/lua/move.lua, replace.lua, orphan.lua,
// fetch_pending.lua through lib/fate.lua), and the results they give.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "redis/connection.hpp"
#include "streamq/task.hpp"

namespace streamq::detail {

/// Results of the `move` script.
inline constexpr std::int64_t move_not_pending = 0;  // already acked, deleted or never ours
inline constexpr std::int64_t move_not_owner = -1;   // another consumer owns the entry now

/// Results of the `start` script.
inline constexpr std::int64_t start_ok = 1;
inline constexpr std::int64_t start_not_owner = 0;
inline constexpr std::int64_t start_body_gone = -1;
inline constexpr std::int64_t start_cancelled = -2;

/// What a dead-letter or retry write tells the Lua that writes it (write_fate() in
/// src/lua/lib/fate.lua): appends 'retry', `queue` and the copy's fields, or 'dead_letter', the
/// reason, error, failed_at, the most fields a dead-letter entry keeps, `queue` and the fields
/// read. `queue` is the queue's stream name (a partition's, ConsumerOptions::stream): a tracked
/// task's record `<queue>:task:<task_id>` says what became of it (lib/settle.lua), and when the
/// fields read have a unique_key, the dead letter releases the lock `<queue>:unique:<unique_key>`
/// if it still holds the task's id; "" leaves both alone (a provisional record whose task still
/// runs).
void append_retry(Argv& argv, std::string_view queue, const Fields& copy);
/// A task handed back unfinished and uncounted (its worker stopped while it ran): 'back',
/// `queue` and its fields as they were; written into the stream at once, its record queued.
void append_hand_back(Argv& argv, std::string_view queue, const Fields& fields);
/// The same for a copy that waits in the delayed set for `delay` (by the server's clock) and
/// then goes to `stream`: 'delay', the delay in ms, the member's nonce, the stream, `queue`, the
/// fields; 'hold' instead of 'delay' when it was not `attempted` (put back unrun by a rate
/// limit: a tracked task's record says delayed, not retrying).
void append_delayed_retry(Argv& argv, Millis delay, std::string nonce, std::string_view stream,
                          std::string_view queue, const Fields& copy, bool attempted = true);
void append_dead_letter(Argv& argv, std::string_view reason, std::string_view error,
                        std::string_view failed_at, std::string_view queue, const Fields& fields_read);

}  // namespace streamq::detail
