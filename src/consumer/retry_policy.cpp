// SPDX-License-Identifier: MIT
#include "retry_policy.hpp"

#include <algorithm>
#include <cmath>
#include <random>
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

std::chrono::milliseconds retry_delay(const RetryBackoff& b, int retry_count, double unit) noexcept {
  if (b.base.count() <= 0) return std::chrono::milliseconds(0);
  const double cap = static_cast<double>(b.cap.count());
  // factor^n overflows to inf for a large n, and min() then gives the cap.
  const double ceiling =
      std::min(cap, static_cast<double>(b.base.count()) * std::pow(b.factor, std::max(0, retry_count)));
  const double delay = b.jitter ? ceiling * std::clamp(unit, 0.0, 1.0) : ceiling;
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::min(cap, std::floor(delay))));
}

double unit_random() noexcept {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(generator);
}

Fields retry_copy(const Fields& original, int retry_count, std::string error) {
  Fields copy = original;
  set_field(copy, field::retry_count, std::to_string(retry_count + 1));
  set_field(copy, field::last_error, std::move(error));
  return copy;
}

}  // namespace streamq::detail
