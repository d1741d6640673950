// SPDX-License-Identifier: MIT
// The Stats parser on replies fed to hiredis' reader (no server): a real snapshot's replies,
// and numbers no server sends (a clock or count that would overflow the sums, a due time that
// is not a number) refused with streamq::Error rather than read into undefined behaviour. The
// fuzz target fuzz_stats checks the same parser on arbitrary bytes.
#include <hiredis/hiredis.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "redis/reply.hpp"
#include "resp.hpp"
#include "stats/stats_read.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

using test::bulk;
std::string num(std::int64_t n) { return ":" + std::to_string(n) + "\r\n"; }
std::string arr(std::initializer_list<std::string> items) {
  std::string out = "*" + std::to_string(items.size()) + "\r\n";
  for (const std::string& i : items) out += i;
  return out;
}
const std::string kNil = "$-1\r\n";
const std::string kNoKey = "-ERR no such key\r\n";

std::vector<Reply> replies(const std::string& bytes) {
  std::unique_ptr<redisReader, void (*)(redisReader*)> reader(redisReaderCreate(), redisReaderFree);
  EXPECT_EQ(redisReaderFeed(reader.get(), bytes.data(), bytes.size()), REDIS_OK);
  std::vector<Reply> out;
  for (;;) {
    void* r = nullptr;
    EXPECT_EQ(redisReaderGetReply(reader.get(), &r), REDIS_OK);
    if (r == nullptr) return out;
    out.emplace_back(static_cast<redisReply*>(r));
  }
}

/// The first pipeline's 14 replies for a queue of 5 entries, one group with one consumer
/// holding 2, a delayed task and a dead letter; `time`, `length` and `score` replace those parts.
std::string first_pipeline(const std::string& time = arr({bulk("1796215373"), bulk("2927")}),
                           std::int64_t length = 5, const std::string& score = "1796215375000") {
  const std::string stream_info =
      arr({bulk("length"), num(length), bulk("entries-added"), num(7), bulk("first-entry"),
           arr({bulk("1796215370000-0"), arr({bulk("task_id"), bulk("t0")})})});
  const std::string groups =
      arr({arr({bulk("name"), bulk("workers"), bulk("consumers"), num(1), bulk("pending"), num(2),
                bulk("last-delivered-id"), bulk("1796215371000-0"), bulk("lag"), num(3)})});
  return time + num(1) + num(1) + num(1) + stream_info + groups + arr({bulk("m"), bulk(score)}) +
         arr({bulk("entries-added"), num(1)}) + num(0) + kNoKey + kNoKey + num(0) + kNoKey + kNoKey;
}

std::string group_pipeline(std::int64_t idle = 1500) {
  return arr({arr({bulk("name"), bulk("w1"), bulk("pending"), num(2), bulk("idle"), num(idle)})}) +
         arr({arr({bulk("1796215370000-0"), bulk("w1"), num(idle), num(1)})});
}

QueueStats parse(const std::string& first, const std::string& groups) {
  StatsOptions o;
  o.stream = "q";
  return parse_queue_stats(o, replies(first), replies(groups));
}

TEST(StatsParse, ReadsARealSnapshot) {
  const QueueStats st = parse(first_pipeline(), group_pipeline());
  EXPECT_TRUE(st.exists);
  EXPECT_EQ(st.length, 5);
  EXPECT_EQ(st.entries_added, 7);
  EXPECT_EQ(st.dlq_length, 1);
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.next_delayed_due_ms, 1796215375000);
  EXPECT_EQ(st.next_delayed_due_in_ms, 1796215375000 - 1796215373002);
  EXPECT_EQ(st.oldest_entry_age_ms, 3002);
  ASSERT_EQ(st.groups.size(), 1u);
  EXPECT_EQ(st.groups[0].pending, 2);
  EXPECT_EQ(st.groups[0].lag, 3);
  ASSERT_EQ(st.groups[0].consumers.size(), 1u);
  EXPECT_EQ(st.groups[0].consumers[0].name, "w1");
  EXPECT_EQ(st.groups[0].oldest_pending_idle_ms, 1500);
  EXPECT_EQ(st.length, 5);
}

TEST(StatsParse, RefusesNumbersNoServerSends) {
  // A clock whose milliseconds overflow, or a negative one.
  EXPECT_THROW(parse(first_pipeline(arr({bulk("9223372036854775807"), bulk("0")})), group_pipeline()), Error);
  EXPECT_THROW(parse(first_pipeline(arr({bulk("-5"), bulk("0")})), group_pipeline()), Error);
  EXPECT_THROW(parse(first_pipeline(arr({bulk("1796215373"), bulk("1000000")})), group_pipeline()), Error);
  // Counts that would overflow the sums over levels and partitions, or negative ones.
  EXPECT_THROW(parse(first_pipeline(arr({bulk("1796215373"), bulk("0")}), -1), group_pipeline()), Error);
  EXPECT_THROW(parse(first_pipeline(arr({bulk("1796215373"), bulk("0")}), 4'000'000'000'000'000'000),
                     group_pipeline()),
               Error);
  EXPECT_THROW(parse(first_pipeline(), group_pipeline(-1)), Error);
  // A due time that is not a number of ms (std::stod threw std::invalid_argument here, and a
  // cast of 1e300 to an integer was undefined).
  for (const char* score : {"nan", "inf", "1e300", "-1", "12abc", ""}) {
    EXPECT_THROW(parse(first_pipeline(arr({bulk("1796215373"), bulk("0")}), 5, score), group_pipeline()),
                 Error)
        << score;
  }
  // Replies missing.
  EXPECT_THROW(parse(first_pipeline() + "", ""), Error);
  EXPECT_THROW(parse(num(1), group_pipeline()), Error);
  // A reply of another type where a number is due.
  const std::string text_pending =
      arr({arr({bulk("name"), bulk("w1"), bulk("pending"), bulk("two"), bulk("idle"), num(1)})}) + arr({});
  EXPECT_THROW(parse(first_pipeline(), text_pending), Error);
  // Nil where an array is due reads as empty (what Redis sends for nothing).
  EXPECT_TRUE(parse(first_pipeline(), kNil + kNil).groups.at(0).consumers.empty());
}

}  // namespace
}  // namespace streamq::detail
