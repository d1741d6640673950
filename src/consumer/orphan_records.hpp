// SPDX-License-Identifier: MIT
// The provisional dead-letter records of tasks whose entry was deleted while their handler ran
// (src/lua/orphan.lua): once the holder is gone (its note expired), the record is the task's
// fate, and settle_orphans.lua ends the task dead through the one settle path (its record, its
// lock, its flow's parent, its batch). The reclaimer runs it with each pass, on its thread and
// connection.
#pragma once

#include <cstdint>

#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

/// Ends the tasks of level `stream`'s provisional records whose holder is gone (at most 100 a
/// call); returns how many. Throws ConnectionError / ReplyError.
std::int64_t settle_orphan_records(Shared& s, ScriptRunner& scripts, std::uint16_t stream);

}  // namespace streamq::detail
