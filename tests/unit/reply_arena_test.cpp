// SPDX-License-Identifier: MIT
// Replies built in arenas are the same trees hiredis' own reader builds, whatever their
// shape, size or how the bytes arrive; and the commands streamq formats are the bytes
// hiredis' formatter makes. No server.
#include <gtest/gtest.h>

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "redis/connection.hpp"
#include "redis/reply_arena.hpp"
#include "resp.hpp"

namespace {

using namespace streamq::detail;

using streamq::test::bulk;
using streamq::test::ReaderPtr;

/// Feeds `resp` to `reader` `step` bytes at a time and returns every complete reply.
std::vector<redisReply*> read_all(redisReader* reader, std::string_view resp, std::size_t step) {
  std::vector<redisReply*> out;
  for (std::size_t pos = 0; pos < resp.size(); pos += step) {
    EXPECT_EQ(redisReaderFeed(reader, resp.data() + pos, std::min(step, resp.size() - pos)), REDIS_OK);
    for (;;) {
      void* r = nullptr;
      EXPECT_EQ(redisReaderGetReply(reader, &r), REDIS_OK);
      if (r == nullptr) break;
      out.push_back(static_cast<redisReply*>(r));
    }
  }
  return out;
}

void expect_same(const redisReply* a, const redisReply* b, const std::string& path) {
  ASSERT_NE(a, nullptr) << path;
  ASSERT_NE(b, nullptr) << path;
  ASSERT_EQ(a->type, b->type) << path;
  EXPECT_EQ(a->integer, b->integer) << path;
  ASSERT_EQ(a->len, b->len) << path;
  if (a->str != nullptr || b->str != nullptr) {
    ASSERT_NE(a->str, nullptr) << path;
    ASSERT_NE(b->str, nullptr) << path;
    EXPECT_EQ(std::string_view(a->str, a->len), std::string_view(b->str, b->len)) << path;
    EXPECT_EQ(a->str[a->len], '\0') << path;  // NUL-terminated as hiredis does
  }
  ASSERT_EQ(a->elements, b->elements) << path;
  for (std::size_t i = 0; i < a->elements; ++i)
    expect_same(a->element[i], b->element[i], path + "/" + std::to_string(i));
}

/// Parses `resp` with hiredis' reader and with the arena reader, fed `step` bytes at a time.
void expect_same_trees(std::string_view resp, std::size_t step) {
  SCOPED_TRACE("step " + std::to_string(step));
  ReaderPtr plain(redisReaderCreate());
  ReaderPtr arena(redisReaderCreate());
  use_reply_arena(arena.get());
  const auto want = read_all(plain.get(), resp, resp.size());
  const auto got = read_all(arena.get(), resp, step);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    expect_same(got[i], want[i], "reply " + std::to_string(i));
    freeReplyObject(want[i]);
    free_arena_reply(got[i]);
  }
}

/// An XREADGROUP reply with `n` entries of `fields` fields each.
std::string xreadgroup_reply(int n, int fields, std::size_t value_size) {
  std::string r = "*1\r\n*2\r\n" + bulk("task_queue") + "*" + std::to_string(n) + "\r\n";
  for (int e = 0; e < n; ++e) {
    r +=
        "*2\r\n" + bulk(std::to_string(1700000000000 + e) + "-0") + "*" + std::to_string(2 * fields) + "\r\n";
    for (int f = 0; f < fields; ++f)
      r += bulk("field" + std::to_string(f)) + bulk(std::string(value_size, 'a' + f % 26));
  }
  return r;
}

TEST(ReplyArena, EveryReplyShapeMatchesHiredis) {
  const std::string resp =
      "+OK\r\n"
      "-ERR boom\r\n"
      ":42\r\n"
      ":-7\r\n"
      "$-1\r\n"
      "*-1\r\n"
      "$0\r\n\r\n"
      "*0\r\n" +
      bulk(std::string("bin\0ary\r\n", 10)) + "*3\r\n:1\r\n$-1\r\n*2\r\n+a\r\n*1\r\n-E x\r\n";
  for (std::size_t step : {std::size_t{1}, std::size_t{3}, resp.size()}) expect_same_trees(resp, step);
}

TEST(ReplyArena, LargeRepliesSpanManyBlocks) {
  // 64 entries of 12 fields (~1,800 nodes) and one value larger than any block.
  expect_same_trees(xreadgroup_reply(64, 6, 80), 4096);
  expect_same_trees(xreadgroup_reply(2, 3, 300000), 65536);
  expect_same_trees("*3\r\n" + bulk(std::string(200000, 'x')) + ":1\r\n" + bulk("y"), 7);
}

TEST(ReplyArena, ManyRepliesInARowReuseTheirBlocks) {
  ReaderPtr arena(redisReaderCreate());
  use_reply_arena(arena.get());
  const std::string one = xreadgroup_reply(16, 6, 40);
  for (int round = 0; round < 200; ++round) {
    const auto replies = read_all(arena.get(), one + one, one.size() / 3);
    ASSERT_EQ(replies.size(), 2u);
    EXPECT_EQ(replies[1]->element[0]->element[1]->elements, 16u);
    for (redisReply* r : replies) free_arena_reply(r);
  }
}

TEST(ReplyArena, AProtocolErrorMidReplyFreesWhatWasBuilt) {
  ReaderPtr arena(redisReaderCreate());
  use_reply_arena(arena.get());
  const std::string bad = "*3\r\n" + bulk("first") + ":2\r\n" + "?garbage\r\n";
  ASSERT_EQ(redisReaderFeed(arena.get(), bad.data(), bad.size()), REDIS_OK);
  void* r = nullptr;
  EXPECT_EQ(redisReaderGetReply(arena.get(), &r), REDIS_ERR);  // the partial root is freed by the reader
  EXPECT_EQ(r, nullptr);
  free_arena_reply(nullptr);  // and null is fine
}

TEST(FormatCommand, MatchesHiredisFormatterByteForByte) {
  std::string out;
  const std::vector<std::vector<std::string>> commands = {
      {"PING"},
      {"XADD", "q", "*", "payload", "{\"a\":1}"},
      {"SET", "", std::string("\0\r\n\xff", 4)},
      {"XACK", "q", "g", std::string(300, '7'), "1-0", "2-0"},
  };
  for (const auto& words : commands) {
    Argv argv;
    for (const auto& w : words) argv.add(w);
    format_command(argv, out);
    char* want = nullptr;
    const long long n = redisFormatCommandArgv(&want, static_cast<int>(argv.size()),
                                               const_cast<const char**>(argv.data()), argv.lengths());
    ASSERT_GT(n, 0);
    EXPECT_EQ(out, std::string(want, static_cast<std::size_t>(n)));
    redisFreeCommand(want);
  }
}

}  // namespace
