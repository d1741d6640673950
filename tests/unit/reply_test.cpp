// SPDX-License-Identifier: MIT
// Reply views over real hiredis reply trees, built by feeding RESP bytes to hiredis' reader
// (the same code path a live connection uses), so no server is needed.
#include <gtest/gtest.h>

#include <hiredis/hiredis.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "reply.hpp"
#include "streamq/errors.hpp"

namespace {

using streamq::detail::Reply;
using streamq::detail::ReplyView;
using namespace std::string_view_literals;

struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};

// Parses exactly one complete RESP reply.
Reply parse(std::string_view resp) {
  std::unique_ptr<redisReader, ReaderDeleter> reader(redisReaderCreate());
  EXPECT_NE(reader, nullptr);
  EXPECT_EQ(redisReaderFeed(reader.get(), resp.data(), resp.size()), REDIS_OK);
  void* out = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.get(), &out), REDIS_OK);
  EXPECT_NE(out, nullptr) << "incomplete RESP in the test: " << resp;
  return Reply(static_cast<redisReply*>(out));
}

// Runs `f`, which must fail with a protocol error (a plain streamq::Error, not a server error).
void expect_protocol_error(const std::function<void()>& f, const char* what) {
  SCOPED_TRACE(what);
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const streamq::ReplyError& e) {
    ADD_FAILURE() << "ReplyError instead of a protocol error: " << e.what();
  } catch (const streamq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("protocol"), std::string::npos) << e.what();
  }
}

TEST(Reply, StatusReply) {
  const Reply r = parse("+OK\r\n");
  ASSERT_TRUE(r);
  const ReplyView v = *r;
  EXPECT_TRUE(v.is_string());
  EXPECT_FALSE(v.is_nil());
  EXPECT_FALSE(v.is_error());
  EXPECT_EQ(v.str(), "OK");
}

TEST(Reply, BulkStringKeepsBinaryBytes) {
  const Reply r = parse("$5\r\na\0b\r\n\r\n"sv);
  EXPECT_EQ(r.view().str(), "a\0b\r\n"sv);
  EXPECT_EQ(r.view().str().size(), 5u);
}

TEST(Reply, EmptyBulkStringIsNotNil) {
  const Reply r = parse("$0\r\n\r\n");
  EXPECT_FALSE(r.view().is_nil());
  EXPECT_EQ(r.view().str(), "");
}

TEST(Reply, Integers) {
  EXPECT_EQ(parse(":42\r\n").view().integer(), 42);
  EXPECT_EQ(parse(":-7\r\n").view().integer(), -7);
  EXPECT_EQ(parse(":9007199254740993\r\n").view().integer(), 9007199254740993LL);
  EXPECT_EQ(parse(":42\r\n").view().as_int(), 42);
  EXPECT_TRUE(parse(":0\r\n").view().is_integer());
}

TEST(Reply, AsIntAcceptsIntegerStrings) {
  EXPECT_EQ(parse("$2\r\n17\r\n").view().as_int(), 17);
  EXPECT_EQ(parse("$3\r\n-17\r\n").view().as_int(), -17);
  EXPECT_EQ(parse("+1234567890123\r\n").view().as_int(), 1234567890123LL);
}

TEST(Reply, AsIntRefusesNonNumericStrings) {
  expect_protocol_error([] { parse("$3\r\n1x2\r\n").view().as_int(); }, "1x2");
  expect_protocol_error([] { parse("$0\r\n\r\n").view().as_int(); }, "empty");
  expect_protocol_error([] { parse("$3\r\n 12\r\n").view().as_int(); }, "leading space");
  expect_protocol_error([] { parse("*0\r\n").view().as_int(); }, "array");
}

TEST(Reply, ArrayIndexing) {
  const Reply r = parse("*3\r\n$1\r\na\r\n:2\r\n*1\r\n$1\r\nb\r\n");
  const ReplyView v = *r;
  EXPECT_TRUE(v.is_array());
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].str(), "a");
  EXPECT_EQ(v[1].integer(), 2);
  ASSERT_EQ(v[2].size(), 1u);
  EXPECT_EQ(v[2][0].str(), "b");
}

TEST(Reply, OutOfRangeIndexThrows) {
  const Reply r = parse("*2\r\n:1\r\n:2\r\n");
  expect_protocol_error([&] { (void)(*r)[2]; }, "index 2 of 2");
  expect_protocol_error([&] { (void)(*r)[1000]; }, "index 1000");
  expect_protocol_error([] { (void)parse("*0\r\n").view()[0]; }, "index into empty array");
  expect_protocol_error([] { (void)parse("*-1\r\n").view()[0]; }, "index into nil array");
}

TEST(Reply, NilBulkAndNilArray) {
  const Reply bulk = parse("$-1\r\n");
  EXPECT_TRUE(bulk.view().is_nil());
  EXPECT_FALSE(bulk.view().is_string());
  EXPECT_EQ(bulk.view().size(), 0u);

  const Reply array = parse("*-1\r\n");
  EXPECT_TRUE(array.view().is_nil());
  EXPECT_FALSE(array.view().is_array());
  EXPECT_EQ(array.view().size(), 0u);

  const Reply empty = parse("*0\r\n");
  EXPECT_FALSE(empty.view().is_nil());
  EXPECT_TRUE(empty.view().is_array());
  EXPECT_EQ(empty.view().size(), 0u);
}

TEST(Reply, NilInsideAnArray) {
  // XREADGROUP/XCLAIM report a deleted entry's body as nil.
  const Reply r = parse("*2\r\n$3\r\n1-0\r\n$-1\r\n");
  EXPECT_FALSE(r.view()[0].is_nil());
  EXPECT_TRUE(r.view()[1].is_nil());
}

TEST(Reply, EmptyAndNullViews) {
  const Reply none;
  EXPECT_FALSE(none);
  EXPECT_TRUE(none.view().is_nil());
  EXPECT_EQ(none.view().size(), 0u);
  const ReplyView null_view(nullptr);
  EXPECT_TRUE(null_view.is_nil());
  EXPECT_FALSE(null_view.is_string());
  EXPECT_FALSE(null_view.is_error());
  EXPECT_NO_THROW(null_view.check());
  expect_protocol_error([&] { (void)null_view.str(); }, "str of null");
  expect_protocol_error([&] { (void)null_view.integer(); }, "integer of null");
}

TEST(Reply, TypeMismatchesAreProtocolErrors) {
  expect_protocol_error([] { (void)parse(":1\r\n").view().str(); }, "str of integer");
  expect_protocol_error([] { (void)parse("*0\r\n").view().str(); }, "str of array");
  expect_protocol_error([] { (void)parse("$-1\r\n").view().str(); }, "str of nil");
  expect_protocol_error([] { (void)parse("$1\r\n5\r\n").view().integer(); }, "integer of string");
  expect_protocol_error([] { (void)parse("*0\r\n").view().integer(); }, "integer of array");
  expect_protocol_error([] { (void)parse("$1\r\nx\r\n").view().size(); }, "size of string");
  expect_protocol_error([] { (void)parse(":3\r\n").view().size(); }, "size of integer");
  expect_protocol_error([] { (void)parse(":3\r\n").view()[0]; }, "index into integer");
  expect_protocol_error([] { (void)parse("+OK\r\n").view().error(); }, "error of status");
}

TEST(Reply, FieldLookupInFlatArray) {
  // XINFO GROUPS-style entry: name, consumers, pending, lag (nil on 7.0 after deletions).
  const Reply r = parse(
      "*10\r\n"
      "$4\r\nname\r\n$7\r\nworkers\r\n"
      "$9\r\nconsumers\r\n:2\r\n"
      "$7\r\npending\r\n:5\r\n"
      "$17\r\nlast-delivered-id\r\n$15\r\n1700000000000-3\r\n"
      "$3\r\nlag\r\n$-1\r\n");
  const ReplyView v = *r;
  EXPECT_EQ(v.field("name").str(), "workers");
  EXPECT_EQ(v.field("consumers").integer(), 2);
  EXPECT_EQ(v.field("pending").as_int(), 5);
  EXPECT_EQ(v.field("last-delivered-id").str(), "1700000000000-3");
  EXPECT_TRUE(v.field("lag").is_nil());
  EXPECT_TRUE(v.field("entries-read").is_nil());
  EXPECT_TRUE(v.field("").is_nil());
}

TEST(Reply, FieldMatchesKeysNotValues) {
  // "name" appears as a value first; only the key at an even position counts.
  const Reply r = parse("*4\r\n$5\r\nalias\r\n$4\r\nname\r\n$4\r\nname\r\n$1\r\nx\r\n");
  EXPECT_EQ(r.view().field("name").str(), "x");
  EXPECT_EQ(r.view().field("alias").str(), "name");
  EXPECT_TRUE(r.view().field("x").is_nil());
}

TEST(Reply, FieldIgnoresATrailingKeyWithoutValue) {
  const Reply r = parse("*3\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n");
  EXPECT_EQ(r.view().field("a").integer(), 1);
  EXPECT_TRUE(r.view().field("b").is_nil());
}

TEST(Reply, FieldOfNilIsNilAndOfScalarIsAProtocolError) {
  EXPECT_TRUE(parse("*-1\r\n").view().field("name").is_nil());
  expect_protocol_error([] { (void)parse("$4\r\nname\r\n").view().field("name"); }, "field of string");
}

TEST(Reply, CheckThrowsReplyErrorWithServerPrefix) {
  const Reply r = parse("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
  EXPECT_TRUE(r.view().is_error());
  EXPECT_FALSE(r.view().is_string());
  EXPECT_EQ(r.view().error(), "WRONGTYPE Operation against a key holding the wrong kind of value");
  try {
    r.view().check();
    FAIL() << "check() did not throw";
  } catch (const streamq::ReplyError& e) {
    EXPECT_EQ(e.prefix(), "WRONGTYPE");
    EXPECT_STREQ(e.what(), "WRONGTYPE Operation against a key holding the wrong kind of value");
  }
}

TEST(Reply, AccessorsOnAnErrorReplySurfaceTheServerError) {
  // A caller that skips check() still gets the server's error, not a misleading type error.
  const Reply r = parse("-NOPERM this user has no permissions to run the 'xadd' command\r\n");
  EXPECT_THROW((void)r.view().str(), streamq::ReplyError);
  EXPECT_THROW((void)r.view().integer(), streamq::ReplyError);
  EXPECT_THROW((void)r.view().as_int(), streamq::ReplyError);
  EXPECT_THROW((void)r.view().size(), streamq::ReplyError);
  try {
    (void)r.view().integer();
  } catch (const streamq::ReplyError& e) {
    EXPECT_EQ(e.prefix(), "NOPERM");
  }
}

TEST(Reply, ErrorNestedInAnArray) {
  // Pipelined/EXEC replies carry per-command errors inside the array.
  const Reply r = parse("*2\r\n:1\r\n-NOGROUP No such key 'q' or consumer group 'g'\r\n");
  EXPECT_NO_THROW(r.view().check());
  EXPECT_EQ(r.view()[0].integer(), 1);
  EXPECT_TRUE(r.view()[1].is_error());
  try {
    r.view()[1].check();
    FAIL() << "check() did not throw";
  } catch (const streamq::ReplyError& e) {
    EXPECT_EQ(e.prefix(), "NOGROUP");
  }
}

TEST(Reply, CheckReturnsTheSameViewForChaining) {
  const Reply r = parse(":5\r\n");
  EXPECT_EQ(r.view().check().integer(), 5);
  EXPECT_EQ(r.view().check().raw(), r.view().raw());
}

TEST(ReplyError, PrefixIsTheFirstWord) {
  EXPECT_EQ(streamq::ReplyError("NOGROUP No such key").prefix(), "NOGROUP");
  EXPECT_EQ(streamq::ReplyError("OOM command not allowed when used memory > 'maxmemory'.").prefix(),
            "OOM");
  EXPECT_EQ(streamq::ReplyError("ERR").prefix(), "ERR");
  EXPECT_STREQ(streamq::ReplyError("NOGROUP No such key").what(), "NOGROUP No such key");
  const streamq::Error& as_root = streamq::ReplyError("BUSY script running");
  EXPECT_STREQ(as_root.what(), "BUSY script running");
}

}  // namespace
