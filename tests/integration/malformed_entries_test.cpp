// SPDX-License-Identifier: MIT
// Entries that are not tasks (no JSON, invalid UTF-8, deep nesting, missing or duplicated
// fields, counters out of range, thousands of fields) are dead-lettered as malformed with their
// raw bytes, and nothing runs.
#include <atomic>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

TEST_F(ConsumerTest, HostileEntriesAreDeadLetteredWithoutRunningAnything) {
  const std::string now = "2026-11-29T18:00:00.123456";
  auto task = [&](std::string payload) {
    return Fields{{"task_id", "t"},    {"task_type", "work"}, {"payload", std::move(payload)},
                  {"created_at", now}, {"max_retries", "3"},  {"retry_count", "0"}};
  };
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::vector<Fields> hostile = {
      task("{not json"),
      task(deep),
      task("\"\xff\xfe invalid utf-8\""),
      task("\"" + std::string(2u << 20, 'x') + "\""),
      task(std::string("{\"a\":\"") + '\0' + "\"}"),
      Fields{{"task_type", "work"}, {"payload", "{}"}, {"created_at", now}},
      Fields{{"task_id", "t"}, {"payload", "{}"}, {"created_at", now}},
      Fields{{"task_id", "t"}, {"task_type", "work"}, {"created_at", now}},
      Fields{{"task_id", "t"}, {"task_type", "work"}, {"payload", "{}"}, {"created_at", "yesterday"}},
      Fields{{"task_id", "t"},
             {"task_type", "work"},
             {"payload", "{}"},
             {"created_at", now},
             {"retry_count", "-1"}},
      Fields{{"task_id", "t"},
             {"task_type", "work"},
             {"payload", "{}"},
             {"created_at", now},
             {"max_retries", "99999999999999999999"}},
      Fields{
          {"task_id", "t"}, {"task_id", "u"}, {"task_type", "work"}, {"payload", "{}"}, {"created_at", now}},
  };
  std::vector<std::string> entry_ids;
  for (const auto& f : hostile) entry_ids.push_back(xadd(f));
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(
      wait_until([&] { return xlen(dlq) == static_cast<std::int64_t>(hostile.size()) && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(xlen(stream), 0);
  std::map<std::string, Fields> by_original;
  for (const auto& [id, f] : client.xrange(dlq)) {
    EXPECT_EQ(Client::get(f, "reason"), "malformed") << Client::get(f, "error");
    EXPECT_FALSE(Client::get(f, "error").empty());
    by_original[Client::get(f, "original_id")] = f;
  }
  ASSERT_EQ(by_original.size(), hostile.size());
  // The dead-letter entry keeps the raw bytes, never a re-serialised tree.
  EXPECT_EQ(Client::get(by_original[entry_ids[1]], "payload"), deep);
  EXPECT_EQ(Client::get(by_original[entry_ids[2]], "payload"), "\"\xff\xfe invalid utf-8\"");
  EXPECT_EQ(Client::get(by_original[entry_ids[11]], "error"), "duplicate field task_id");
}

TEST_F(ConsumerTest, EntryWithThousandsOfFieldsIsDeadLetteredInPart) {
  Fields f{{"task_id", "t"}, {"task_type", "work"}, {"payload", "{}"}, {"created_at", "2026-11-29T18:00:00"}};
  for (int i = 0; i < 5000; ++i) f.emplace_back("x" + std::to_string(i), "v");
  xadd(f);
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(ran, 0);
  const auto e = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(e, "reason"), "malformed");
  EXPECT_EQ(Client::get(e, "task_id"), "t");
  EXPECT_EQ(Client::get(e, "fields_dropped"), "4004");  // 5004 fields, the first 1000 kept
}

}  // namespace
}  // namespace streamq::test
