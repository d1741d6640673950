// SPDX-License-Identifier: MIT
// The Lua scripts as Redis runs them: every hash is the one Redis computes, scripts flushed
// under a running worker are sent again, the dead-letter write keeps the fields (at most the
// field cap) and says what happened, and the orphan record is written once however often its
// write is repeated.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "redis/scripts.hpp"
#include "running_consumer.hpp"
#include "wire/codec.hpp"
#include "wire/fate_args.hpp"

namespace streamq::test {
namespace {

/// A value of `INFO <section>`, e.g. info_field("errorstats", "errorstat_NOSCRIPT:count").
std::int64_t info_field(Client& c, const std::string& section, const std::string& key) {
  const std::string info(c.cmd({"INFO", section}).view().str());
  const auto pos = info.find(key + "=");
  return pos == std::string::npos ? 0 : std::stoll(info.substr(pos + key.size() + 1));
}

TEST_F(ConsumerTest, EveryScriptHashIsTheOneRedisComputes) {
  // The SHA-1 is computed at build time; a wrong one would make every EVALSHA miss.
  for (std::size_t i = 0; i < static_cast<std::size_t>(detail::ScriptId::count_); ++i) {
    const auto id = static_cast<detail::ScriptId>(i);
    const detail::Reply r = client.cmd({"SCRIPT", "LOAD", detail::script_source(id)});
    ASSERT_TRUE(r.view().is_string())
        << detail::script_name(id) << ": " << (r.view().is_error() ? r.view().error() : "");
    EXPECT_EQ(r.view().str(), detail::script_sha(id)) << detail::script_name(id);
  }
}

TEST_F(ConsumerTest, ScriptsFlushedUnderARunningConsumerAreSentAgain) {
  auto p = producer();
  std::atomic<int> done{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("fail_once", [&](const Task& t) {
      if (t.retry_count() == 0) throw std::runtime_error("first attempt");
      ++done;
    });
  });
  p.enqueue("fail_once", "{}");
  ASSERT_TRUE(wait_until([&] { return done == 1 && pending() == 0; }));  // the move script is cached now
  client.cmd({"SCRIPT", "FLUSH"}).view().check();
  p.enqueue("fail_once", "{}");
  ASSERT_TRUE(wait_until([&] { return done == 2 && pending() == 0 && xlen(stream) == 0; }));
  rc.stop();
  EXPECT_EQ(rc.consumer().metrics().retried, 2u);
  EXPECT_GE(info_field(client, "errorstats", "errorstat_NOSCRIPT:count"), 1);  // EVALSHA was refused ...
  EXPECT_EQ(xlen(dlq), 0);                                                     // ... and EVAL did the work
}

TEST_F(ConsumerTest, ADeadLetterKeepsTheFieldsAndSaysWhatHappened) {
  xadd({{"task_id", "t1"}, {"payload", "{}"}, {"reason", "forged"}, {"priority", "high"}});
  const auto ids = read_as("holder", 1);
  ASSERT_EQ(ids.size(), 1u);
  detail::Argv argv;
  const std::string source(detail::script_source(detail::ScriptId::move));
  const Fields read = {{"task_id", "t1"}, {"payload", "{}"}, {"reason", "forged"}, {"priority", "high"}};
  std::vector<std::string> args{"EVAL", source, "2", stream, dlq, "workers", "holder", ids[0]};
  detail::append_dead_letter(argv, "permanent", "card declined", "2026-12-01T00:00:00.000000", stream, read);
  for (std::size_t i = 0; i < argv.size(); ++i) args.emplace_back(argv[i]);
  const detail::Reply r = client.cmd(args);
  ASSERT_TRUE(r.view().is_string()) << (r.view().is_error() ? r.view().error() : "");
  const detail::Reply range = client.cmd({"XRANGE", dlq, "-", "+"});
  const auto entries = range.view().check();
  ASSERT_EQ(entries.size(), 1u);
  std::vector<std::pair<std::string, std::string>> got;
  const auto f = entries[0][1];
  for (std::size_t i = 0; i + 1 < f.size(); i += 2) got.emplace_back(f[i].str(), f[i + 1].str());
  const Fields want = {{"task_id", "t1"},
                       {"payload", "{}"},
                       {"priority", "high"},
                       {"error", "card declined"},
                       {"failed_at", "2026-12-01T00:00:00.000000"},
                       {"original_id", ids[0]},
                       {"consumer", "holder"},
                       {"reason", "permanent"}};  // the entry's own "reason" is replaced
  EXPECT_EQ(got, want);
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(xlen(stream), 0);
}

TEST_F(ConsumerTest, ADeadLetterKeepsAtMostTheFieldCap) {
  xadd({{"task_id", "t1"}});
  const auto ids = read_as("holder", 1);
  ASSERT_EQ(ids.size(), 1u);
  Fields read;
  for (std::size_t i = 0; i < detail::kMaxFields + 250; ++i) read.emplace_back("f" + std::to_string(i), "v");
  const std::string source(detail::script_source(detail::ScriptId::move));
  std::vector<std::string> args{"EVAL", source, "2", stream, dlq, "workers", "holder", ids[0]};
  detail::Argv argv;
  detail::append_dead_letter(argv, "malformed", "too many fields", "t", stream, read);
  for (std::size_t i = 0; i < argv.size(); ++i) args.emplace_back(argv[i]);
  const detail::Reply r = client.cmd(args);
  ASSERT_TRUE(r.view().is_string()) << (r.view().is_error() ? r.view().error() : "");
  const detail::Reply range = client.cmd({"XRANGE", dlq, "-", "+"});
  const auto f = range.view().check()[0][1];
  ASSERT_EQ(f.size(), 2 * (detail::kMaxFields + 1 + 5));
  EXPECT_EQ(f[2 * (detail::kMaxFields - 1)].str(), "f" + std::to_string(detail::kMaxFields - 1));
  EXPECT_EQ(f[2 * detail::kMaxFields].str(), "fields_dropped");
  EXPECT_EQ(f[2 * detail::kMaxFields + 1].str(), "250");
}

TEST_F(ConsumerTest, AnOrphanRecordIsWrittenOnceHoweverOftenItsWriteIsRepeated) {
  // The write of a provisional record may be repeated when its reply was lost; a second run
  // must answer with the first record, not write another (the task would be in two places).
  producer().enqueue("work", R"({"k":1})");
  const auto ids = read_as("holder", 1);
  ASSERT_EQ(ids.size(), 1u);
  client.cmd({"XDEL", stream, ids[0]}).view().check();
  const std::string_view source = detail::script_source(detail::ScriptId::orphan);
  auto write = [&] {
    return client.cmd({"EVAL", source, "4", stream, dlq, stream + ":orphan:" + ids[0],
                       stream + ":orphan:provisional", "workers", "holder", ids[0], "30000", "dead_letter",
                       "body_lost", "gone", "2026-12-01T00:00:00.000000", "1000", stream, "task_id", "t"});
  };
  const detail::Reply first = write();
  ASSERT_TRUE(first.view().is_string()) << (first.view().is_error() ? first.view().error() : "");
  const detail::Reply again = write();
  ASSERT_TRUE(again.view().is_string());
  EXPECT_EQ(again.view().str(), first.view().str());
  EXPECT_EQ(xlen(dlq), 1);
  EXPECT_EQ(pending(), 0);
}

}  // namespace
}  // namespace streamq::test
