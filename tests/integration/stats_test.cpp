// SPDX-License-Identifier: MIT
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"

namespace streamq::test {
namespace {

class StatsTest : public ::testing::Test {
 protected:
  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();
  StatsOptions options() const { return {.connection = {.url = server.url()}, .stream = stream}; }
  /// The server's clock (TIME) in milliseconds.
  std::int64_t server_ms() {
    const detail::Reply r = client.cmd({"TIME"});
    return r.view()[0].as_int() * 1000 + r.view()[1].as_int() / 1000;
  }
};

TEST_F(StatsTest, MissingQueueReadsZerosAndCreatesNothing) {
  StatsReader reader(options());
  const QueueStats st = reader.read();
  EXPECT_FALSE(st.exists);
  EXPECT_EQ(st.length, 0);
  EXPECT_EQ(st.pending_total, 0);
  EXPECT_EQ(st.dlq_length, 0);
  EXPECT_EQ(st.dlq_entries_added, 0);
  EXPECT_EQ(st.delayed, 0);
  EXPECT_TRUE(st.groups.empty());
  EXPECT_TRUE(st.oldest_entry_id.empty());
  EXPECT_EQ(client.integer({"DBSIZE"}), 0);
  EXPECT_FALSE(st.to_prometheus().empty());
  EXPECT_EQ(nlohmann::json::parse(st.to_json())["queue_length"], 0);
}

TEST_F(StatsTest, EmptyStreamWithGroup) {
  client.cmd({"XGROUP", "CREATE", stream, "workers", "0", "MKSTREAM"}).view().check();
  const QueueStats st = StatsReader(options()).read();
  EXPECT_TRUE(st.exists);
  EXPECT_EQ(st.length, 0);
  ASSERT_EQ(st.groups.size(), 1u);
  EXPECT_EQ(st.groups[0].pending, 0);
  if (client.redis_at_least(7, 0)) {
    EXPECT_EQ(st.groups[0].lag, 0);
  } else {
    EXPECT_FALSE(st.groups[0].lag.has_value()) << "XINFO GROUPS has no lag before Redis 7.0";
  }
  EXPECT_FALSE(st.groups[0].oldest_pending_idle_ms.has_value());
  EXPECT_TRUE(st.oldest_entry_id.empty());
}

TEST_F(StatsTest, BusyQueue) {
  // XINFO reports entries-added and a group's lag since Redis 7.0; before, streamq says 0 and
  // "unknown" (docs/compatibility.md).
  const bool redis7 = client.redis_at_least(7, 0);
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  std::vector<TaskSpec> batch(10, TaskSpec{"t", "{}"});
  producer.enqueue_batch(batch);
  client.cmd({"XGROUP", "CREATE", stream, "workers", "0"}).view().check();
  client.cmd({"XGROUP", "CREATE", stream, "audit", "$"}).view().check();
  const std::int64_t read_before = server_ms();
  client.cmd({"XREADGROUP", "GROUP", "workers", "c1", "COUNT", "3", "STREAMS", stream, ">"}).view().check();
  const std::int64_t read_after = server_ms();
  client.cmd({"XADD", stream + ":dlq", "*", "error", "x"});
  client.cmd({"XADD", stream + ":dlq", "*", "error", "y"});
  client.cmd({"ZADD", stream + ":delayed", "1", "a"});

  const std::int64_t stats_before = server_ms();
  const QueueStats st = StatsReader(options()).read();
  const std::int64_t stats_after = server_ms();
  EXPECT_TRUE(st.exists);
  EXPECT_EQ(st.length, 10);
  EXPECT_EQ(st.entries_added, redis7 ? 10 : 0);
  EXPECT_EQ(st.pending_total, 3);
  EXPECT_EQ(st.dlq_length, 2);
  EXPECT_EQ(st.dlq_entries_added, redis7 ? 2 : 0);
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.oldest_entry_id, client.xrange(stream).at(0).first);
  ASSERT_TRUE(st.oldest_entry_age_ms.has_value());
  // The age by the server's clock: between the two TIME readings around read(), minus the
  // millisecond time in the entry's id.
  const std::int64_t added_ms = std::stoll(st.oldest_entry_id.substr(0, st.oldest_entry_id.find('-')));
  EXPECT_GE(*st.oldest_entry_age_ms, stats_before - added_ms);
  EXPECT_LE(*st.oldest_entry_age_ms, stats_after - added_ms);
  ASSERT_EQ(st.groups.size(), 2u);
  const GroupInfo& w = st.groups[0].name == "workers" ? st.groups[0] : st.groups[1];
  EXPECT_EQ(w.pending, 3);
  if (redis7) {
    EXPECT_EQ(w.lag, 7);
  } else {
    EXPECT_FALSE(w.lag.has_value());
  }
  EXPECT_EQ(w.last_delivered_id, client.xrange(stream).at(2).first);
  ASSERT_EQ(w.consumers.size(), 1u);
  EXPECT_EQ(w.consumers[0].name, "c1");
  EXPECT_EQ(w.consumers[0].pending, 3);
  // Idle since its XREADGROUP, by the server's clock.
  EXPECT_GE(w.consumers[0].idle_ms, stats_before - read_after);
  EXPECT_LE(w.consumers[0].idle_ms, stats_after - read_before);
  ASSERT_TRUE(w.oldest_pending_idle_ms.has_value());
  EXPECT_GE(*w.oldest_pending_idle_ms, stats_before - read_after);
  EXPECT_LE(*w.oldest_pending_idle_ms, stats_after - read_before);

  // Filtered to one group.
  auto o = options();
  o.group = "workers";
  const QueueStats only = StatsReader(o).read();
  ASSERT_EQ(only.groups.size(), 1u);
  EXPECT_EQ(only.pending_total, 3);

  // The two alert lines of the seed: dlq_length > 0, pending_total > 100.
  const auto doc = nlohmann::json::parse(st.to_json());
  EXPECT_EQ(doc["dlq_length"], 2);
  EXPECT_EQ(doc["pending_total"], 3);
  EXPECT_EQ(doc["queue_length"], 10);
  EXPECT_EQ(doc["consumers_active"], 1);

  const std::string prom = st.to_prometheus();
  const std::regex line_re(
      R"((# (HELP|TYPE) streamq_[a-z_]+ .+)|(streamq_[a-z_]+\{[a-z_]+="(\\.|[^"\\])*"(,[a-z_]+="(\\.|[^"\\])*")*\} -?[0-9.e+]+))");
  std::istringstream in(prom);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    EXPECT_TRUE(std::regex_match(line, line_re)) << line;
    samples += line.starts_with("streamq_") ? 1 : 0;
  }
  EXPECT_GT(samples, 10);
  EXPECT_NE(prom.find("streamq_dlq_length{stream=\"" + stream + "\"} 2\n"), std::string::npos) << prom;
  EXPECT_NE(
      prom.find("streamq_dlq_entries_added_total{stream=\"" + stream + "\"} " + (redis7 ? "2" : "0") + "\n"),
      std::string::npos)
      << prom;

  // A dead letter deleted (replayed, or by hand) still counts as dead-lettered; the length drops.
  const std::string first_dead = client.xrange(stream + ":dlq").at(0).first;
  client.cmd({"XDEL", stream + ":dlq", first_dead}).view().check();
  const QueueStats later = StatsReader(options()).read();
  EXPECT_EQ(later.dlq_length, 1);
  EXPECT_EQ(later.dlq_entries_added, redis7 ? 2 : 0);
  EXPECT_EQ(nlohmann::json::parse(later.to_json())["dlq_entries_added"], redis7 ? 2 : 0);
  EXPECT_NE(prom.find("streamq_group_pending{stream=\"" + stream + "\",group=\"workers\"} 3\n"),
            std::string::npos);
  if (redis7) {
    EXPECT_NE(prom.find("streamq_group_lag{stream=\"" + stream + "\",group=\"workers\"} 7\n"),
              std::string::npos);
  } else {
    EXPECT_EQ(prom.find("streamq_group_lag{"), std::string::npos) << "an unknown lag is omitted";
  }
}

TEST_F(StatsTest, WrongTypeStreamKeyGivesReplyError) {
  client.cmd({"SET", stream, "x"});
  try {
    StatsReader(options()).read();
    FAIL() << "no error";
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.prefix(), "WRONGTYPE");
  }
}

}  // namespace
}  // namespace streamq::test
