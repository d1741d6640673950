// SPDX-License-Identifier: MIT
// Recognising the enqueue script's refusals and Redis's redirections in a reply. See refusals.hpp.
#include "refusals.hpp"

#include <string_view>

#include "wire/codec.hpp"

namespace streamq::detail {

bool is_queue_full(const Reply& r) {
  return r.view().is_error() && r.view().error().starts_with("QUEUEFULL");
}

bool is_batch_closed(const Reply& r) {
  return r.view().is_error() && r.view().error().starts_with("BATCHCLOSED");
}

bool is_debounce_type(const Reply& r) {
  return r.view().is_error() && r.view().error().starts_with("DEBOUNCETYPE");
}

std::optional<Duplicate> parse_duplicate(const Reply& r) {
  if (!r.view().is_error()) return std::nullopt;
  std::string_view e = r.view().error();
  if (!e.starts_with("DUPLICATE ")) return std::nullopt;
  e.remove_prefix(10);
  Duplicate d;
  const auto sp = e.find(' ');
  const auto index = detail::parse_count(e.substr(0, sp));
  if (sp == std::string_view::npos || !index) return std::nullopt;
  e.remove_prefix(sp + 1);
  const auto sp2 = e.find(' ');
  const auto length = detail::parse_count(e.substr(0, sp2));
  if (sp2 == std::string_view::npos || !length || sp2 + 1 + static_cast<std::size_t>(*length) > e.size()) {
    return std::nullopt;
  }
  d.index = static_cast<std::size_t>(*index);
  d.holder = std::string(e.substr(sp2 + 1, static_cast<std::size_t>(*length)));
  const std::string_view rest = e.substr(sp2 + 1 + static_cast<std::size_t>(*length));
  d.key = std::string(rest.starts_with(" holds ") ? rest.substr(7) : rest);
  return d;
}

bool sent_to_wrong_place(const Reply& r) {
  if (!r.view().is_error()) return false;
  const std::string_view e = r.view().error();
  return e.starts_with("MOVED ") || e.starts_with("ASK ") || e.starts_with("TRYAGAIN");
}

std::string duplicate_message(const Duplicate& d) {
  return "duplicate task: unique lock " + d.key + " is held by task " + d.holder +
         " (enqueued within its unique_for window and not finished)";
}

}  // namespace streamq::detail
