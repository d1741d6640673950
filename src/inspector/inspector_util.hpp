// SPDX-License-Identifier: MIT
// Small helpers the Inspector's files share: entry ids, an entry's fields, the levels.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "redis/reply.hpp"
#include "streamq/errors.hpp"
#include "streamq/inspector.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

inline const std::string& level_stream(const QueueKeys& k, Priority p) { return priority_stream(k, p); }

/// `<ms>-<seq>`, both decimal.
inline bool is_entry_id(std::string_view id) {
  const auto dash = id.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == id.size()) return false;
  const auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(id.substr(0, dash)) && digits(id.substr(dash + 1));
}

/// The fields of a flat [name, value, ...] reply.
inline Fields fields_of(ReplyView flat) {
  Fields f;
  if (!flat.is_array()) return f;  // a deleted entry's body (XPENDING lists it, XRANGE has none)
  f.reserve(flat.size() / 2);
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2) f.emplace_back(flat[i].str(), flat[i + 1].str());
  return f;
}

/// The value of field `name`, or "" when there is none.
inline std::string_view field_of(const Fields& f, std::string_view name) {
  for (const auto& [k, v] : f) {
    if (k == name) return v;
  }
  return {};
}

/// Whether a dead letter's fields match the filter's type and reason (its ids are not checked).
inline bool matches(const Fields& f, const DeadLetterFilter& filter) {
  return (filter.task_type.empty() || field_of(f, "task_type") == filter.task_type) &&
         (filter.reason.empty() || field_of(f, "reason") == filter.reason);
}

inline void check_queue(const std::string& queue) {
  if (queue.empty()) throw ConfigError("queue must not be empty");
}

}  // namespace streamq::detail
