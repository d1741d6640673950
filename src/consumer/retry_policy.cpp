// SPDX-License-Identifier: MIT
#include "retry_policy.hpp"

#include <algorithm>
#include <utility>

namespace streamq::detail {
namespace {

void set_field(Fields& fields, std::string_view name, std::string value) {
  for (auto& [k, v] : fields) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  fields.emplace_back(name, std::move(value));
}

bool is_dead_letter_field(std::string_view k) noexcept {
  return k == field::error || k == field::failed_at || k == field::original_id || k == field::consumer ||
         k == field::reason;
}

}  // namespace

Decision decide(const Attempt& a) noexcept {
  switch (a.result) {
    case AttemptResult::succeeded: return {Verdict::ack};
    case AttemptResult::failed:
      if (a.retry_count < a.max_retries) return {Verdict::retry};
      return {Verdict::dead_letter, reason::retries_exhausted};
    case AttemptResult::permanent: return {Verdict::dead_letter, reason::permanent};
    case AttemptResult::malformed: return {Verdict::dead_letter, reason::malformed};
    case AttemptResult::no_handler: return {Verdict::dead_letter, reason::no_handler};
    case AttemptResult::body_lost: return {Verdict::dead_letter, reason::body_lost};
  }
  return {Verdict::dead_letter, reason::malformed};
}

Fields retry_copy(const Fields& original, int retry_count, std::string error) {
  Fields copy = original;
  set_field(copy, field::retry_count, std::to_string(retry_count + 1));
  set_field(copy, field::last_error, std::move(error));
  return copy;
}

Fields dead_letter_entry(const Fields& original, DeadLetter info) {
  Fields f;
  f.reserve(std::min(original.size(), kMaxFields) + 6);
  std::size_t dropped = 0;
  for (const auto& kv : original) {
    if (is_dead_letter_field(kv.first)) continue;  // replaced below
    if (f.size() == kMaxFields) {
      ++dropped;
      continue;
    }
    f.push_back(kv);
  }
  if (dropped > 0) f.emplace_back("fields_dropped", std::to_string(dropped));
  f.emplace_back(field::error, std::move(info.error));
  f.emplace_back(field::failed_at, std::move(info.failed_at));
  f.emplace_back(field::original_id, info.original_id);
  f.emplace_back(field::consumer, info.consumer);
  f.emplace_back(field::reason, info.reason);
  return f;
}

}  // namespace streamq::detail
