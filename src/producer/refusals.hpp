// SPDX-License-Identifier: MIT
// The refusals of the enqueue script and of Redis a producer recognises in a reply (queue full,
// duplicate task, sent to the wrong node), and their messages.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "redis/reply.hpp"

namespace streamq::detail {

/// Whether `r` is the enqueue script's QUEUEFULL refusal.
bool is_queue_full(const Reply& r);

/// Whether `r` is the enqueue script's BATCHCLOSED refusal (a task of a batch that is not open).
bool is_batch_closed(const Reply& r);

/// Whether `r` is the enqueue script's DEBOUNCETYPE refusal (a debounced call of another task
/// type than the task its key's cycle holds).
bool is_debounce_type(const Reply& r);

/// A DUPLICATE refusal of the enqueue script: "DUPLICATE <index> <id length> <id> holds <key>".
struct Duplicate {
  std::size_t index = 0;  // in the script call
  std::string holder;
  std::string key;
};

/// The DUPLICATE refusal `r` is, or nullopt for any other reply.
std::optional<Duplicate> parse_duplicate(const Reply& r);

/// A reply saying that the command was not run where it went and may be sent again as it is:
/// MOVED or ASK (its slot is served elsewhere), TRYAGAIN (a migration has split its keys).
bool sent_to_wrong_place(const Reply& r);

/// The message of the DuplicateTaskError for `d`.
std::string duplicate_message(const Duplicate& d);

}  // namespace streamq::detail
