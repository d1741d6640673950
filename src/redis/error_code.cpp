// SPDX-License-Identifier: MIT
#include "error_code.hpp"

namespace streamq::detail {
namespace {

constexpr std::string_view kScriptWrapper = "ERR Error running script (call to ";

std::string_view first_word(std::string_view s) noexcept { return s.substr(0, s.find(' ')); }

bool is_code(std::string_view word) noexcept {
  if (word.empty() || word.front() < 'A' || word.front() > 'Z') return false;
  for (const char c : word) {
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Removes a "<chunk>:<line>: " location that Redis 6.2's error handler puts before the error
// ("@user_script:12: "); with `spaced`, the "<chunk>: <line>: " form of its luaPushError
// ("@user_script: 12: "). Both start with '@': a Lua runtime error's own "user_script:3: "
// does not, and stays, so that it is not mistaken for a code.
bool strip_location(std::string_view& s, bool spaced) noexcept {
  if (!s.starts_with('@')) return false;
  const std::size_t colon = s.find(':');
  if (colon == std::string_view::npos) return false;
  std::size_t i = colon + 1;
  if (spaced) {
    if (i >= s.size() || s[i] != ' ') return false;
    ++i;
  }
  const std::size_t digits = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == digits || s.substr(i, 2) != ": ") return false;
  s.remove_prefix(i + 2);
  return true;
}

}  // namespace

std::string_view unwrap_script_error(std::string_view message) noexcept {
  if (!message.starts_with(kScriptWrapper)) return message;
  std::string_view inner = message.substr(kScriptWrapper.size());
  const std::size_t end = inner.find("): ");
  if (end == std::string_view::npos) return message;
  inner.remove_prefix(end + 3);
  strip_location(inner, false);
  if (strip_location(inner, true) && inner.starts_with('-')) inner.remove_prefix(1);
  return is_code(first_word(inner)) ? inner : message;
}

std::string_view error_code(std::string_view message) noexcept {
  return first_word(unwrap_script_error(message));
}

}  // namespace streamq::detail
