// SPDX-License-Identifier: MIT
// The pieces of the Inspector's listing cursors: the hex of delayed members, and the message for a
// cursor that is not one. See cursor.hpp.
#include "cursor.hpp"

namespace streamq::detail {

std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string bad_cursor(std::string_view cursor, TaskState state) {
  return "cursor \"" + std::string(cursor) + "\" is not a cursor of " + std::string(to_string(state)) +
         " tasks (pass back a TaskPage::next_cursor of the same state)";
}

}  // namespace streamq::detail
