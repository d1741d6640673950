// SPDX-License-Identifier: MIT
#include "reply.hpp"

#include <algorithm>
#include <charconv>

#include "error_code.hpp"
#include "hiredis_compat.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

[[noreturn]] void protocol(const char* what) {
  throw Error(std::string("protocol: unexpected reply from Redis (") + what + ")");
}

}  // namespace

bool ReplyView::is_nil() const noexcept { return r_ == nullptr || r_->type == REDIS_REPLY_NIL; }
bool ReplyView::is_error() const noexcept { return r_ != nullptr && r_->type == REDIS_REPLY_ERROR; }
bool ReplyView::is_array() const noexcept { return r_ != nullptr && r_->type == REDIS_REPLY_ARRAY; }
bool ReplyView::is_integer() const noexcept { return r_ != nullptr && r_->type == REDIS_REPLY_INTEGER; }
bool ReplyView::is_string() const noexcept {
  return r_ != nullptr && (r_->type == REDIS_REPLY_STRING || r_->type == REDIS_REPLY_STATUS);
}

std::string_view ReplyView::str() const {
  check();
  if (!is_string()) protocol("expected a string");
  return {r_->str, r_->len};
}

std::string_view ReplyView::error() const {
  if (!is_error()) protocol("expected an error");
  return {r_->str, r_->len};
}

std::int64_t ReplyView::integer() const {
  check();
  if (!is_integer()) protocol("expected an integer");
  return r_->integer;
}

std::int64_t ReplyView::as_int() const {
  check();
  if (is_integer()) return r_->integer;
  if (!is_string()) protocol("expected an integer");
  std::int64_t value = 0;
  const char* end = r_->str + r_->len;
  auto [ptr, ec] = std::from_chars(r_->str, end, value);
  if (ec != std::errc() || ptr != end) protocol("expected an integer string");
  return value;
}

std::size_t ReplyView::size() const {
  if (is_nil()) return 0;
  check();
  if (!is_array()) protocol("expected an array");
  return r_->elements;
}

ReplyView ReplyView::operator[](std::size_t i) const {
  if (i >= size()) protocol("array index out of range");
  return ReplyView(r_->element[i]);
}

const ReplyView& ReplyView::check() const {
  if (is_error()) throw ReplyError(std::string(r_->str, r_->len));
  if (r_ != nullptr && is_resp3_only_type(r_->type)) protocol("RESP3 reply type");
  return *this;
}

ReplyView ReplyView::field(std::string_view key) const {
  const std::size_t n = size();
  for (std::size_t i = 0; i + 1 < n; i += 2) {
    ReplyView k(r_->element[i]);
    if (k.is_string() && k.str() == key) return ReplyView(r_->element[i + 1]);
  }
  return ReplyView(nullptr);
}

void ReplyDeleter::operator()(redisReply* r) const noexcept {
  if (free != nullptr) {
    free(r);
  } else {
    freeReplyObject(r);
  }
}

bool is_transient_error(std::string_view error) noexcept {
  static constexpr std::string_view codes[] = {"LOADING",    "OOM",        "BUSY",     "READONLY",
                                               "MASTERDOWN", "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN",
                                               "UNBLOCKED",  "MOVED",      "ASK"};
  const std::string_view code = error_code(error);
  return std::find(std::begin(codes), std::end(codes), code) != std::end(codes);
}

}  // namespace streamq::detail
