// SPDX-License-Identifier: MIT
#include "reply_arena.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "hiredis_compat.hpp"

namespace streamq::detail {
namespace {

// A reply lives in a chain of blocks: the first one starts with the chain's header and the
// root redisReply; every node, element vector and string of the reply follows, bump-allocated.
// Blocks stay below glibc's mmap threshold (128 KiB), so no reply costs an mmap/munmap pair.
constexpr std::size_t kFirstBlock = 4096;
constexpr std::size_t kMaxBlock = std::size_t{64} * 1024;
constexpr std::size_t kAlign = alignof(std::max_align_t);

constexpr std::size_t aligned(std::size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

struct Block {
  Block* next;
  std::size_t used;
  std::size_t capacity;  // bytes after the header
  char* data() noexcept { return reinterpret_cast<char*>(this) + aligned(sizeof(Block)); }
};

struct Chain {
  Block* first;
  Block* last;
};

// The root redisReply sits right after the Chain, at a fixed offset into the first block.
constexpr std::size_t kRootOffset = aligned(sizeof(Chain));

// Blocks of freed replies are kept per thread for the next reply (a reader reads reply after
// reply on one thread), up to kCacheBytes. Trivial thread_locals, so a reply freed while its
// thread's cache is being torn down still finds them usable.
constexpr std::size_t kCacheBytes = std::size_t{256} * 1024;
thread_local Block* t_cached = nullptr;
thread_local std::size_t t_cached_bytes = 0;
thread_local bool t_cache_closed = false;

struct CacheReaper {
  ~CacheReaper() {
    t_cache_closed = true;
    while (t_cached != nullptr) {
      Block* next = t_cached->next;
      std::free(t_cached);
      t_cached = next;
    }
    t_cached_bytes = 0;
  }
};
thread_local CacheReaper t_reaper;

Block* new_block(std::size_t capacity) {
  for (Block** link = &t_cached; *link != nullptr; link = &(*link)->next) {
    Block* b = *link;
    if (b->capacity < capacity) continue;
    *link = b->next;
    t_cached_bytes -= b->capacity;
    b->next = nullptr;
    b->used = 0;
    return b;
  }
  void* p = std::malloc(aligned(sizeof(Block)) + capacity);
  if (p == nullptr) return nullptr;
  auto* b = static_cast<Block*>(p);
  b->next = nullptr;
  b->used = 0;
  b->capacity = capacity;
  return b;
}

void release_block(Block* b) {
  // Small blocks (scalar replies) go back to malloc, whose own caches serve them well; the
  // cache keeps blocks that replies with children can grow in.
  if (!t_cache_closed && b->capacity >= kFirstBlock && t_cached_bytes + b->capacity <= kCacheBytes) {
    (void)&t_reaper;  // constructed with the first cached block, so it frees them at thread exit
    b->next = t_cached;
    t_cached = b;
    t_cached_bytes += b->capacity;
  } else {
    std::free(b);
  }
}

Chain* chain_of(redisReply* root) {
  return reinterpret_cast<Chain*>(reinterpret_cast<char*>(root) - kRootOffset);
}

void* bump(Chain* c, std::size_t n) {
  n = aligned(n);
  Block* b = c->last;
  if (b->capacity - b->used < n) {
    std::size_t cap = b->capacity * 2;
    if (cap > kMaxBlock) cap = kMaxBlock;
    if (cap < n) cap = n;
    Block* next = new_block(cap);
    if (next == nullptr) return nullptr;
    b->next = next;
    c->last = next;
    b = next;
  }
  void* p = b->data() + b->used;
  b->used += n;
  return p;
}

/// A zeroed node for `task`: the root of a new chain, or a child in its root's chain, linked
/// into its parent's element vector as hiredis' own functions do. Only an aggregate root
/// (`aggregate`: an array, map, set, ...) gets room for children: a scalar reply is all there
/// is of it, so it takes just its size (a pipeline of 1,000 EXISTS is 1,000 roots).
redisReply* node(const redisReadTask* task, int type, std::size_t extra, void** extra_out,
                 bool aggregate = false) {
  redisReply* r = nullptr;
  if (task->parent == nullptr) {
    const std::size_t need = kRootOffset + aligned(sizeof(redisReply)) + aligned(extra);
    Block* b = new_block(aggregate && need < kFirstBlock ? kFirstBlock : need);
    if (b == nullptr) return nullptr;
    auto* c = reinterpret_cast<Chain*>(b->data());
    c->first = c->last = b;
    b->used = kRootOffset;
    r = static_cast<redisReply*>(bump(c, sizeof(redisReply)));
    if (extra_out != nullptr) *extra_out = extra > 0 ? bump(c, extra) : nullptr;
  } else {
    const redisReadTask* root = task->parent;
    while (root->parent != nullptr) root = root->parent;
    Chain* c = chain_of(static_cast<redisReply*>(root->obj));
    r = static_cast<redisReply*>(bump(c, sizeof(redisReply)));
    if (r == nullptr) return nullptr;
    if (extra_out != nullptr) {
      *extra_out = extra > 0 ? bump(c, extra) : nullptr;
      if (extra > 0 && *extra_out == nullptr) return nullptr;
    }
  }
  if (r == nullptr) return nullptr;
  std::memset(static_cast<void*>(r), 0, sizeof(redisReply));
  r->type = type;
  if (task->parent != nullptr) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    parent->element[task->idx] = r;
  }
  return r;
}

void* create_string(const redisReadTask* task, char* str, size_t len) {
  void* buf = nullptr;
  redisReply* r = node(task, task->type, len + 1, &buf);
  if (r == nullptr) return nullptr;
  char* s = static_cast<char*>(buf);
#ifdef REDIS_REPLY_VERB
  if (task->type == REDIS_REPLY_VERB && len >= 4) {  // "txt:" header, as hiredis strips it
    std::memcpy(r->vtype, str, 3);
    r->vtype[3] = '\0';
    str += 4;
    len -= 4;
  }
#endif
  std::memcpy(s, str, len);
  s[len] = '\0';
  r->str = s;
  r->len = len;
  return r;
}

template <typename Count>
void* create_array(const redisReadTask* task, Count elements) {
  const auto n = static_cast<std::size_t>(elements);
  void* vec = nullptr;
  redisReply* r = node(task, task->type, n * sizeof(redisReply*), &vec, true);
  if (r == nullptr) return nullptr;
  if (n > 0) {
    r->element = static_cast<redisReply**>(vec);
    std::memset(vec, 0, n * sizeof(redisReply*));
  }
  r->elements = n;
  return r;
}

void* create_integer(const redisReadTask* task, long long value) {
  redisReply* r = node(task, REDIS_REPLY_INTEGER, 0, nullptr);
  if (r != nullptr) r->integer = value;
  return r;
}

void* create_nil(const redisReadTask* task) { return node(task, REDIS_REPLY_NIL, 0, nullptr); }

#if HIREDIS_MAJOR >= 1
void* create_double(const redisReadTask* task, double value, char* str, size_t len) {
  void* buf = nullptr;
  redisReply* r = node(task, REDIS_REPLY_DOUBLE, len + 1, &buf);
  if (r == nullptr) return nullptr;
  r->dval = value;
  r->str = static_cast<char*>(buf);
  std::memcpy(r->str, str, len);
  r->str[len] = '\0';
  r->len = len;
  return r;
}

void* create_bool(const redisReadTask* task, int value) {
  redisReply* r = node(task, REDIS_REPLY_BOOL, 0, nullptr);
  if (r != nullptr) r->integer = value != 0;
  return r;
}

redisReplyObjectFunctions arena_functions = {create_string,   create_array<size_t>, create_integer,
                                             create_double,   create_nil,           create_bool,
                                             free_arena_reply};
#else
redisReplyObjectFunctions arena_functions = {create_string, create_array<int>, create_integer, create_nil,
                                             free_arena_reply};
#endif

}  // namespace

void use_reply_arena(redisReader* reader) noexcept { reader->fn = &arena_functions; }

void free_arena_reply(void* reply) noexcept {
  if (reply == nullptr) return;
  Block* b = chain_of(static_cast<redisReply*>(reply))->first;
  while (b != nullptr) {
    Block* next = b->next;
    release_block(b);
    b = next;
  }
}

}  // namespace streamq::detail
