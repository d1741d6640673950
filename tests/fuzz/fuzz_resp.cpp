// SPDX-License-Identifier: MIT
// Fuzz target: arbitrary bytes from a "server" through hiredis' reader.
//  - Differential: the reply arena (src/reply_arena.cpp) must build the same trees as
//    hiredis' own reader functions, and fail where they fail.
//  - Every reply is then read the way streamq's parsers read replies: the ReplyView accessors
//    on every node (a wrong shape must be a streamq::Error, never a crash), field lookups as
//    XINFO's are read, the CLUSTER SHARDS / CLUSTER SLOTS parsers, and the redirection and
//    transient-error classification of error replies.
#include <hiredis/hiredis.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "redis/cluster.hpp"
#include "redis/error_code.hpp"
#include "redis/reply.hpp"
#include "redis/reply_arena.hpp"
#include "streamq/errors.hpp"

namespace {

using namespace streamq::detail;

struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

void require(bool ok) {
  if (!ok) std::abort();
}

/// Every reply of `bytes`, fed in two pieces; `failed` tells whether the reader hit a protocol error.
std::vector<void*> read_all(redisReader* reader, std::string_view bytes, bool& failed) {
  std::vector<void*> out;
  const std::size_t half = bytes.size() / 2;
  for (const std::string_view piece : {bytes.substr(0, half), bytes.substr(half)}) {
    if (redisReaderFeed(reader, piece.data(), piece.size()) != REDIS_OK) {
      failed = true;
      return out;
    }
    for (;;) {
      void* r = nullptr;
      if (redisReaderGetReply(reader, &r) != REDIS_OK) {
        failed = true;
        return out;
      }
      if (r == nullptr) break;
      out.push_back(r);
    }
  }
  return out;
}

bool same(const redisReply* a, const redisReply* b) {
  if (a->type != b->type) return false;
  switch (a->type) {
    case REDIS_REPLY_INTEGER: return a->integer == b->integer;
    case REDIS_REPLY_NIL: return true;
    case REDIS_REPLY_ARRAY:
#ifdef REDIS_REPLY_MAP
    case REDIS_REPLY_MAP:
    case REDIS_REPLY_SET:
    case REDIS_REPLY_PUSH:
#endif
      if (a->elements != b->elements) return false;
      for (std::size_t i = 0; i < a->elements; ++i) {
        if (!same(a->element[i], b->element[i])) return false;
      }
      return true;
    default: return std::string_view(a->str, a->len) == std::string_view(b->str, b->len);
  }
}

/// Reads `v` as streamq's parsers might, whatever its shape.
void walk(ReplyView v, int depth) {
  const auto attempt = [](auto&& f) {
    try {
      f();
    } catch (const streamq::Error&) {
      // a shape the caller did not expect: a clear error, as it must be
    }
  };
  attempt([&] { (void)v.str(); });
  attempt([&] { (void)v.integer(); });
  attempt([&] { (void)v.as_int(); });
  attempt([&] { (void)v.check(); });
  if (v.is_error()) {
    const std::string_view e = v.error();
    (void)error_code(e);
    (void)is_transient_error(e);
    // (An empty host is allowed: "MOVED 1 :7001" names the node that answered.)
    if (const auto r = parse_redirect(e))
      require(r->slot >= 0 && r->slot < 16384 && r->to.port >= 0 && r->to.port <= 65535);
  }
  attempt([&] {
    const std::size_t n = v.size();
    attempt([&] { (void)v[n]; });  // one past the end: refused
    (void)v.field("name").is_nil();
    (void)v.field("first-entry").is_nil();
    for (std::size_t i = 0; i < n && depth < 8; ++i) walk(v[i], depth + 1);
  });
}

/// A run of 7 or more digits: an aggregate count hiredis would allocate an element array for
/// up front (0.14 has no cap; 1.x caps it at 2^32-1 elements). The server is trusted not to
/// send those; a fuzzer that did would only measure malloc's limit.
bool has_huge_number(std::string_view s) {
  int run = 0;
  for (const char c : s) {
    run = std::isdigit(static_cast<unsigned char>(c)) != 0 ? run + 1 : 0;
    if (run >= 7) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (has_huge_number(bytes)) return 0;
  ReaderPtr plain(redisReaderCreate());
  ReaderPtr arena(redisReaderCreate());
  use_reply_arena(arena.get());
  bool plain_failed = false, arena_failed = false;
  const std::vector<void*> theirs = read_all(plain.get(), bytes, plain_failed);
  const std::vector<void*> ours = read_all(arena.get(), bytes, arena_failed);
  require(plain_failed == arena_failed);
  require(theirs.size() == ours.size());
  const HostPort asked{"127.0.0.1", 7000};
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const auto* r = static_cast<const redisReply*>(ours[i]);
    require(same(static_cast<const redisReply*>(theirs[i]), r));
    walk(ReplyView(r), 0);
    for (auto parse : {&parse_cluster_shards, &parse_cluster_slots}) {
      try {
        const SlotMap map = parse(ReplyView(r), asked);
        for (int slot : {0, 5460, 16383}) {
          if (const HostPort* m = map.master_of(slot)) require(!m->host.empty());
        }
      } catch (const streamq::Error&) {
        // not a slot map
      }
    }
  }
  for (void* r : theirs) freeReplyObject(r);
  for (void* r : ours) free_arena_reply(r);
  return 0;
}
