// SPDX-License-Identifier: MIT
// Reply views over real hiredis reply trees, built by feeding RESP bytes to hiredis' reader
// (the same code path a live connection uses), so no server is needed.
#include <gtest/gtest.h>

#include <hiredis/hiredis.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "redis/reply.hpp"
#include "resp.hpp"
#include "streamq/errors.hpp"

namespace {

using streamq::detail::Reply;
using streamq::detail::ReplyView;
using namespace std::string_view_literals;

using streamq::test::parse_reply;

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
  const Reply r = parse_reply("+OK\r\n");
  ASSERT_TRUE(r);
  const ReplyView v = *r;
  EXPECT_TRUE(v.is_string());
  EXPECT_FALSE(v.is_nil());
  EXPECT_FALSE(v.is_error());
  EXPECT_EQ(v.str(), "OK");
}

TEST(Reply, BulkStringKeepsBinaryBytes) {
  const Reply r = parse_reply("$5\r\na\0b\r\n\r\n"sv);
  EXPECT_EQ(r.view().str(), "a\0b\r\n"sv);
  EXPECT_EQ(r.view().str().size(), 5u);
}

TEST(Reply, EmptyBulkStringIsNotNil) {
  const Reply r = parse_reply("$0\r\n\r\n");
  EXPECT_FALSE(r.view().is_nil());
  EXPECT_EQ(r.view().str(), "");
}

TEST(Reply, Integers) {
  EXPECT_EQ(parse_reply(":42\r\n").view().integer(), 42);
  EXPECT_EQ(parse_reply(":-7\r\n").view().integer(), -7);
  EXPECT_EQ(parse_reply(":9007199254740993\r\n").view().integer(), 9007199254740993LL);
  EXPECT_EQ(parse_reply(":42\r\n").view().as_int(), 42);
  EXPECT_TRUE(parse_reply(":0\r\n").view().is_integer());
}

TEST(Reply, AsIntAcceptsIntegerStrings) {
  EXPECT_EQ(parse_reply("$2\r\n17\r\n").view().as_int(), 17);
  EXPECT_EQ(parse_reply("$3\r\n-17\r\n").view().as_int(), -17);
  EXPECT_EQ(parse_reply("+1234567890123\r\n").view().as_int(), 1234567890123LL);
}

TEST(Reply, AsIntRefusesNonNumericStrings) {
  expect_protocol_error([] { parse_reply("$3\r\n1x2\r\n").view().as_int(); }, "1x2");
  expect_protocol_error([] { parse_reply("$0\r\n\r\n").view().as_int(); }, "empty");
  expect_protocol_error([] { parse_reply("$3\r\n 12\r\n").view().as_int(); }, "leading space");
  expect_protocol_error([] { parse_reply("*0\r\n").view().as_int(); }, "array");
}

TEST(Reply, ArrayIndexing) {
  const Reply r = parse_reply("*3\r\n$1\r\na\r\n:2\r\n*1\r\n$1\r\nb\r\n");
  const ReplyView v = *r;
  EXPECT_TRUE(v.is_array());
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].str(), "a");
  EXPECT_EQ(v[1].integer(), 2);
  ASSERT_EQ(v[2].size(), 1u);
  EXPECT_EQ(v[2][0].str(), "b");
}

TEST(Reply, OutOfRangeIndexThrows) {
  const Reply r = parse_reply("*2\r\n:1\r\n:2\r\n");
  expect_protocol_error([&] { (void)(*r)[2]; }, "index 2 of 2");
  expect_protocol_error([&] { (void)(*r)[1000]; }, "index 1000");
  expect_protocol_error([] { (void)parse_reply("*0\r\n").view()[0]; }, "index into empty array");
  expect_protocol_error([] { (void)parse_reply("*-1\r\n").view()[0]; }, "index into nil array");
}

TEST(Reply, NilBulkAndNilArray) {
  const Reply bulk = parse_reply("$-1\r\n");
  EXPECT_TRUE(bulk.view().is_nil());
  EXPECT_FALSE(bulk.view().is_string());
  EXPECT_EQ(bulk.view().size(), 0u);

  const Reply array = parse_reply("*-1\r\n");
  EXPECT_TRUE(array.view().is_nil());
  EXPECT_FALSE(array.view().is_array());
  EXPECT_EQ(array.view().size(), 0u);

  const Reply empty = parse_reply("*0\r\n");
  EXPECT_FALSE(empty.view().is_nil());
  EXPECT_TRUE(empty.view().is_array());
  EXPECT_EQ(empty.view().size(), 0u);
}

TEST(Reply, NilInsideAnArray) {
  // XREADGROUP/XCLAIM report a deleted entry's body as nil.
  const Reply r = parse_reply("*2\r\n$3\r\n1-0\r\n$-1\r\n");
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
  expect_protocol_error([] { (void)parse_reply(":1\r\n").view().str(); }, "str of integer");
  expect_protocol_error([] { (void)parse_reply("*0\r\n").view().str(); }, "str of array");
  expect_protocol_error([] { (void)parse_reply("$-1\r\n").view().str(); }, "str of nil");
  expect_protocol_error([] { (void)parse_reply("$1\r\n5\r\n").view().integer(); }, "integer of string");
  expect_protocol_error([] { (void)parse_reply("*0\r\n").view().integer(); }, "integer of array");
  expect_protocol_error([] { (void)parse_reply("$1\r\nx\r\n").view().size(); }, "size of string");
  expect_protocol_error([] { (void)parse_reply(":3\r\n").view().size(); }, "size of integer");
  expect_protocol_error([] { (void)parse_reply(":3\r\n").view()[0]; }, "index into integer");
  expect_protocol_error([] { (void)parse_reply("+OK\r\n").view().error(); }, "error of status");
}

TEST(Reply, FieldLookupInFlatArray) {
  // XINFO GROUPS-style entry: name, consumers, pending, lag (nil on 7.0 after deletions).
  const Reply r = parse_reply(
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
  const Reply r = parse_reply("*4\r\n$5\r\nalias\r\n$4\r\nname\r\n$4\r\nname\r\n$1\r\nx\r\n");
  EXPECT_EQ(r.view().field("name").str(), "x");
  EXPECT_EQ(r.view().field("alias").str(), "name");
  EXPECT_TRUE(r.view().field("x").is_nil());
}

TEST(Reply, FieldIgnoresATrailingKeyWithoutValue) {
  const Reply r = parse_reply("*3\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n");
  EXPECT_EQ(r.view().field("a").integer(), 1);
  EXPECT_TRUE(r.view().field("b").is_nil());
}

TEST(Reply, FieldOfNilIsNilAndOfScalarIsAProtocolError) {
  EXPECT_TRUE(parse_reply("*-1\r\n").view().field("name").is_nil());
  expect_protocol_error([] { (void)parse_reply("$4\r\nname\r\n").view().field("name"); }, "field of string");
}

TEST(Reply, CheckThrowsReplyErrorWithServerPrefix) {
  const Reply r = parse_reply("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
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
  const Reply r = parse_reply("-NOPERM this user has no permissions to run the 'xadd' command\r\n");
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
  const Reply r = parse_reply("*2\r\n:1\r\n-NOGROUP No such key 'q' or consumer group 'g'\r\n");
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
  const Reply r = parse_reply(":5\r\n");
  EXPECT_EQ(r.view().check().integer(), 5);
  EXPECT_EQ(r.view().check().raw(), r.view().raw());
}

TEST(ReplyError, PrefixIsTheFirstWord) {
  EXPECT_EQ(streamq::ReplyError("NOGROUP No such key").prefix(), "NOGROUP");
  EXPECT_EQ(streamq::ReplyError("OOM command not allowed when used memory > 'maxmemory'.").prefix(), "OOM");
  EXPECT_EQ(streamq::ReplyError("ERR").prefix(), "ERR");
  EXPECT_STREQ(streamq::ReplyError("NOGROUP No such key").what(), "NOGROUP No such key");
  const streamq::Error& as_root = streamq::ReplyError("BUSY script running");
  EXPECT_STREQ(as_root.what(), "BUSY script running");
}

// The texts below are what redis-server 6.2.16 and 7.0.15 answered to EVAL (one line each).
TEST(ReplyError, PrefixOfAnErrorRaisedInAScriptOnRedis62IsTheWrappedCode) {
  const std::string wrong_type =
      "ERR Error running script (call to f_1f3b465f6cf3c05cb9ed3db62b0c71afb9a712bd): @user_script:12: "
      "WRONGTYPE Operation against a key holding the wrong kind of value";
  EXPECT_EQ(streamq::ReplyError(wrong_type).prefix(), "WRONGTYPE");
  // what() is the error itself, as on Redis 7 (which adds " script: <sha>, on @user_script:12.").
  EXPECT_STREQ(streamq::ReplyError(wrong_type).what(),
               "WRONGTYPE Operation against a key holding the wrong kind of value");
  // OOM, ACL and unknown-command refusals carry a second location, and OOM its protocol '-'.
  EXPECT_EQ(
      streamq::ReplyError("ERR Error running script (call to f_353e910803c693a4efacc28aea53c6ad98254580): "
                          "@user_script:3: @user_script: 3: -OOM command not allowed when used memory > "
                          "'maxmemory'.")
          .prefix(),
      "OOM");
  EXPECT_STREQ(
      streamq::ReplyError("ERR Error running script (call to f_353e910803c693a4efacc28aea53c6ad98254580): "
                          "@user_script:3: @user_script: 3: -OOM command not allowed when used memory > "
                          "'maxmemory'.")
          .what(),
      "OOM command not allowed when used memory > 'maxmemory'.");
  EXPECT_EQ(
      streamq::ReplyError("ERR Error running script (call to f_cff23549c2ebb605eb5d794e81aed428927903a1): "
                          "@user_script:1: NOGROUP No such key 'st' or consumer group 'nog' in XREADGROUP "
                          "with GROUP option")
          .prefix(),
      "NOGROUP");
  EXPECT_EQ(
      streamq::ReplyError("ERR Error running script (call to f_7208f1b2dd5b0fdbb2039bfb2de8c5006c05f222): "
                          "@user_script:1: BUSYGROUP Consumer Group name already exists")
          .prefix(),
      "BUSYGROUP");
  EXPECT_EQ(
      streamq::ReplyError("ERR Error running script (call to f_7208f1b2dd5b0fdbb2039bfb2de8c5006c05f222): "
                          "@user_script:1: ERR The XGROUP subcommand requires the key to exist.")
          .prefix(),
      "ERR");
}

TEST(ReplyError, ScriptErrorsWithoutACodeOnRedis62AreErr) {
  // As on 7.0 ("ERR user_script:1: ...", "ERR Unknown Redis command called from script ...").
  for (const char* message : {
           "ERR Error running script (call to f_4f5958446b28593dea988ad0a5603cbd6962dd95): @user_script:1: "
           "@user_script: 1: Unknown Redis command called from Lua script",
           "ERR Error running script (call to f_ff967d0ae0e68b4f9e360fa91c54598bc25ad9b6): @user_script:1: "
           "@user_script: 1: The user executing the script can't run this command or subcommand",
           "ERR Error running script (call to f_cf0efd7895bbde8aab6ffbb44ec6bca4bd5ef4c3): @user_script:1: "
           "user_script:1: attempt to index local 'x' (a nil value)",
           // error('RAISEDSTR string'): a Lua error, whatever its words look like
           "ERR Error running script (call to f_0d26d05a625691f8283cdac139a1163609402691): @user_script:1: "
           "user_script:1: RAISEDSTR string",
           "ERR Error running script (call to f_092723df2c4da115e322ab23e7500b73a929e37d): "
           "@err_handler_def:9: "
           "err_handler_def:9: attempt to concatenate local 'err' (a table value)",
           "ERR Error running script (call to f_0d26): ",
           "ERR Error running script (call to f_0d26d05a",
       }) {
    EXPECT_EQ(streamq::ReplyError(message).prefix(), "ERR") << message;
    EXPECT_STREQ(streamq::ReplyError(message).what(), message);  // nothing to unwrap: as it came
  }
}

TEST(ReplyError, PrefixOfAScriptErrorOnRedis7IsItsFirstWord) {
  EXPECT_EQ(streamq::ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value script: "
                                "1f3b465f6cf3c05cb9ed3db62b0c71afb9a712bd, on @user_script:1.")
                .prefix(),
            "WRONGTYPE");
  EXPECT_EQ(streamq::ReplyError("OOM command not allowed when used memory > 'maxmemory'. script: "
                                "44a1d1fa082a2d78f42bc63155425f40b815a824, on @user_script:1.")
                .prefix(),
            "OOM");
  EXPECT_EQ(streamq::ReplyError("ERR user_script:1: RAISEDSTR string script: "
                                "0d26d05a625691f8283cdac139a1163609402691, on @user_script:1.")
                .prefix(),
            "ERR");
  // redis.error_reply() returned by a script comes unwrapped on every version.
  EXPECT_EQ(streamq::ReplyError("QUEUEFULL q holds 10 of 10 tasks").prefix(), "QUEUEFULL");
}

TEST(ReplyError, AnOomInsideAScriptIsTransientOnRedis62Too) {
  EXPECT_TRUE(streamq::detail::is_transient_error(
      "ERR Error running script (call to f_353e910803c693a4efacc28aea53c6ad98254580): @user_script:2: "
      "@user_script: 2: -OOM command not allowed when used memory > 'maxmemory'."));
  EXPECT_TRUE(streamq::detail::is_transient_error(
      "OOM command not allowed when used memory > 'maxmemory'. script: 44a1d1fa, on @user_script:1."));
  EXPECT_FALSE(streamq::detail::is_transient_error(
      "ERR Error running script (call to f_1f3b465f): @user_script:12: WRONGTYPE Operation against a key"));
}

TEST(ReplyError, AReadUnblockedByAFailoverIsTransient) {
  EXPECT_TRUE(streamq::detail::is_transient_error(
      "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"));
  EXPECT_TRUE(streamq::detail::is_transient_error("READONLY You can't write against a read only replica."));
  EXPECT_FALSE(
      streamq::detail::is_transient_error("NOPERM this user has no permissions to run the 'role' command"));
}

}  // namespace
