// SPDX-License-Identifier: MIT
#include "streamq/tracing.hpp"

#include <algorithm>

namespace streamq {

bool valid_traceparent(std::string_view t) noexcept {
  // 00-<32 hex>-<16 hex>-<2 hex>: 55 characters, lower-case hex.
  if (t.size() != 55 || !t.starts_with("00-") || t[35] != '-' || t[52] != '-') return false;
  const auto hex = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  };
  const auto zero = [](std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; };
  const std::string_view trace = t.substr(3, 32), span = t.substr(36, 16), flags = t.substr(53, 2);
  return hex(trace) && hex(span) && hex(flags) && !zero(trace) && !zero(span);
}

}  // namespace streamq
