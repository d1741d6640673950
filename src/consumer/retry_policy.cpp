// SPDX-License-Identifier: MIT
#include "retry_policy.hpp"

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

}  // namespace

Decision decide(const Attempt& a) noexcept {
  switch (a.result) {
    case AttemptResult::succeeded: return {Verdict::ack};
    case AttemptResult::failed:
      if (a.retry_count < a.max_retries) return {Verdict::retry};
      return {Verdict::dead_letter, reason::retries_exhausted};
    case AttemptResult::permanent: return {Verdict::dead_letter, reason::permanent};
    case AttemptResult::bad_payload: return {Verdict::dead_letter, reason::bad_payload};
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

}  // namespace streamq::detail
