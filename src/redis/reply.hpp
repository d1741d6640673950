// SPDX-License-Identifier: MIT
// Owning and non-owning views of hiredis replies with checked accessors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

struct redisReply;

namespace streamq::detail {

/// A non-owning view of one reply node. Accessors throw streamq::Error ("protocol: ...") when
/// the node has an unexpected type, so a surprising server answer becomes an exception,
/// never undefined behaviour.
class ReplyView {
 public:
  explicit ReplyView(const redisReply* r) noexcept : r_(r) {}

  bool is_nil() const noexcept;
  bool is_error() const noexcept;
  bool is_array() const noexcept;
  bool is_integer() const noexcept;
  bool is_string() const noexcept;  // bulk string or status

  std::string_view str() const;    // bulk string or status
  std::string_view error() const;  // error text
  std::int64_t integer() const;
  /// Integer reply, or a bulk string holding an integer (as XINFO sometimes answers).
  std::int64_t as_int() const;
  std::size_t size() const;  // array length (0 for nil)
  ReplyView operator[](std::size_t i) const;

  /// Throws ReplyError when this node is an error reply.
  const ReplyView& check() const;

  /// Looks `key` up in a flat [k1, v1, k2, v2, ...] array (XINFO replies); nil view if absent.
  ReplyView field(std::string_view key) const;

  const redisReply* raw() const noexcept { return r_; }

 private:
  const redisReply* r_;
};

/// True for error replies of a passing server state, worth retrying later: the server is
/// loading its data (LOADING), out of memory under noeviction (OOM), busy with a script
/// (BUSY), a replica or failing over (READONLY, MASTERDOWN, NOREPLICAS, and UNBLOCKED for a
/// blocked read when the master turns replica), or a cluster in transition (TRYAGAIN, CLUSTERDOWN,
/// and MOVED or ASK for a pipelined command: it was not run, the slot map is updated). `error`
/// is the reply text; its code is read by error_code(), so an OOM inside a script counts on Redis 6.2 too.
bool is_transient_error(std::string_view error) noexcept;

/// Frees a top-level reply with the function of the reader that built it.
struct ReplyDeleter {
  void (*free)(void*) = nullptr;  // null: hiredis' freeReplyObject
  void operator()(redisReply* r) const noexcept;
};

/// Owns a top-level reply.
class Reply {
 public:
  Reply() = default;
  /// A reply built by hiredis' default reader functions.
  explicit Reply(redisReply* r) noexcept : r_(r) {}
  /// A reply built by other reader functions, freed with `free`.
  Reply(redisReply* r, void (*free)(void*)) noexcept : r_(r, ReplyDeleter{free}) {}
  ReplyView view() const noexcept { return ReplyView(r_.get()); }
  ReplyView operator*() const noexcept { return view(); }
  explicit operator bool() const noexcept { return static_cast<bool>(r_); }

 private:
  std::unique_ptr<redisReply, ReplyDeleter> r_;
};

}  // namespace streamq::detail
