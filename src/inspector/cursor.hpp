// SPDX-License-Identifier: MIT
// The pieces of the Inspector's listing cursors: a level's letter, a delayed member's bytes in
// hex, and the message for a cursor that is not one of the state listed.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "streamq/inspector.hpp"

namespace streamq::detail {

/// The letter of a level in a cursor.
inline char level_letter(Priority p) { return p == Priority::high ? 'h' : p == Priority::low ? 'l' : 'n'; }

/// The level of a cursor's letter; nullopt for any other letter.
inline std::optional<Priority> level_of_letter(char c) {
  if (c == 'h') return Priority::high;
  if (c == 'n') return Priority::normal;
  if (c == 'l') return Priority::low;
  return std::nullopt;
}

/// A delayed member's bytes in a cursor (they are binary).
std::string to_hex(std::string_view bytes);
/// The bytes to_hex() wrote as `hex`; nullopt when `hex` is not what it writes.
std::optional<std::string> from_hex(std::string_view hex);

/// The ConfigError message for `cursor` given to a listing of `state` tasks that did not return it.
std::string bad_cursor(std::string_view cursor, TaskState state);

}  // namespace streamq::detail
