// SPDX-License-Identifier: MIT
// Wire compatibility with the seed's Python queue, in both directions: raw entries written
// the way the seed writes them, and the seed's own Python code (tests/interop/seed_queue.py).
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis/cluster.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// Runs a command, returns its stdout; the exit status goes to `status`.
std::string run(const std::string& command, int& status) {
  std::string out;
  FILE* f = popen(command.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  status = pclose(f);
  return out;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(text.substr(start, nl - start));
  }
  return out;
}

std::string seed_script() { return std::string(STREAMQ_SOURCE_DIR) + "/tests/interop/seed_queue.py"; }

class InteropTest : public ::testing::Test {
 protected:
  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();
};

TEST_F(InteropTest, SeedShapedEntriesRunInAStreamqWorker) {
  // Exactly what TaskProducer.send_task writes: json.dumps separators, isoformat() with and
  // without microseconds (Python drops ".000000"), a retry copy with retry_count "1".
  const std::vector<std::vector<std::string>> entries = {
      {"task_id", "7d0f7a0c-3c1e-4a8e-9a53-2f1f3f0e5a11", "task_type", "send_email", "payload",
       R"({"to": "user@example.com", "template": "order_confirmation", "order_id": 12345})", "created_at",
       "2025-12-01T09:30:15.250000", "max_retries", "3", "retry_count", "0"},
      {"task_id", "0b5c3f8e-6a7d-4e0f-8f1a-9c2d3e4f5a6b", "task_type", "generate_pdf", "payload",
       R"({"report_type": "monthly", "period": "2025-12"})", "created_at", "2025-12-01T09:30:16",
       "max_retries", "3", "retry_count", "1"},
  };
  for (const auto& e : entries) {
    std::vector<std::string> args{"XADD", stream, "MAXLEN", "~", "10000", "*"};
    args.insert(args.end(), e.begin(), e.end());
    client.cmd(args).view().check();
  }
  std::mutex m;
  std::vector<std::string> seen;
  RunningConsumer rc({.connection = {.url = server.url()}, .stream = stream, .block = 200ms},
                     [&](Consumer& c) {
                       c.on("send_email", [&](const Task& t) {
                         std::lock_guard lock(m);
                         EXPECT_EQ(t.json()["order_id"], 12345);
                         EXPECT_EQ(t.retry_count(), 0);
                         EXPECT_EQ(detail::format_timestamp(t.created_at()), "2025-12-01T09:30:15.250000");
                         seen.push_back(t.id());
                       });
                       c.on("generate_pdf", [&](const Task& t) {
                         std::lock_guard lock(m);
                         EXPECT_EQ(t.json()["period"], "2025-12");
                         EXPECT_EQ(t.retry_count(), 1);
                         EXPECT_EQ(detail::format_timestamp(t.created_at()), "2025-12-01T09:30:16.000000");
                         seen.push_back(t.id());
                       });
                     });
  ASSERT_TRUE(wait_until([&] { return client.integer({"XLEN", stream}) == 0; }));
  rc.stop();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(client.integer({"XLEN", stream + ":dlq"}), 0);
}

TEST_F(InteropTest, SeedPythonProducerFeedsAStreamqWorker) {
  int status = -1;
  const std::string out =
      run("/usr/bin/python3 " + seed_script() + " produce " + server.url() + " '" + stream + "' 20", status);
  ASSERT_EQ(status, 0) << out;
  const auto ids = lines(out);
  ASSERT_EQ(ids.size(), 20u);
  std::mutex m;
  std::set<std::string> seen;
  RunningConsumer rc({.connection = {.url = server.url()}, .stream = stream, .block = 200ms},
                     [&](Consumer& c) {
                       c.on("send_email", [&](const Task& t) {
                         EXPECT_EQ(t.json()["to"], "user@example.com");
                         std::lock_guard lock(m);
                         seen.insert(t.id());
                       });
                     });
  ASSERT_TRUE(wait_until([&] { return client.integer({"XLEN", stream}) == 0; }));
  rc.stop();
  EXPECT_EQ(seen, std::set<std::string>(ids.begin(), ids.end()));
}

TEST_F(InteropTest, StreamqProducerFeedsTheSeedPythonConsumer) {
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  std::vector<std::string> ids;
  ids.push_back(producer.enqueue("send_email", nlohmann::json{{"to", "a@b.c"}}));
  ids.push_back(producer.enqueue("generate_pdf", nlohmann::json{{"period", "2026-11"}}, {.max_retries = 5}));
  ids.push_back(producer.enqueue("reindex", nlohmann::json::array({1, 2})));
  int status = -1;
  const std::string out =
      run("/usr/bin/python3 " + seed_script() + " consume " + server.url() + " '" + stream + "' 3", status);
  ASSERT_EQ(status, 0) << out;
  const auto got = lines(out);
  ASSERT_EQ(got.size(), 3u) << out;
  const auto a = nlohmann::json::parse(got[0]), b = nlohmann::json::parse(got[1]),
             c = nlohmann::json::parse(got[2]);
  EXPECT_EQ(a["task_id"], ids[0]);
  EXPECT_EQ(a["payload"]["to"], "a@b.c");
  EXPECT_EQ(a["retry_count"], 0);
  EXPECT_EQ(a["max_retries"], 3);
  EXPECT_EQ(b["task_type"], "generate_pdf");
  EXPECT_EQ(b["max_retries"], 5);
  EXPECT_EQ(c["payload"], nlohmann::json::array({1, 2}));
}

// Each partition of a partitioned queue is a queue in the seed's format: the seed's consumer
// runs one partition by its name (keyed tasks in their order), and tasks the seed's producer
// writes into a partition reach a partitioned streamq worker.
TEST_F(InteropTest, TheSeedPythonCodeWorksOnOnePartition) {
  constexpr int kParts = 3;
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .partitions = kParts});
  const int keyed = static_cast<int>(detail::crc16("customer-1") % kParts);
  const std::string partition = detail::partition_stream(stream, kParts, keyed);
  std::vector<std::string> in_partition;
  for (int i = 0; i < 3; ++i) {
    in_partition.push_back(
        producer.enqueue("send_email", nlohmann::json{{"n", i}}, {.partition_key = "customer-1"}));
  }
  std::set<std::string> elsewhere;
  for (int i = 0; i < kParts; ++i)
    elsewhere.insert(producer.enqueue("reindex", nlohmann::json{{"round", i}}));
  for (const auto& [entry, fields] : client.xrange(partition)) {  // round robin put one of them here
    const std::string id = Client::get(fields, "task_id");
    if (elsewhere.erase(id) == 1) in_partition.push_back(id);
  }
  ASSERT_EQ(in_partition.size(), 4u);
  int status = -1;
  const std::string out = run(
      "/usr/bin/python3 " + seed_script() + " consume " + server.url() + " '" + partition + "' 4", status);
  ASSERT_EQ(status, 0) << out;
  const auto got = lines(out);
  ASSERT_EQ(got.size(), 4u) << out;
  std::vector<std::string> keyed_order;
  std::set<std::string> ran;
  for (const std::string& line : got) {
    const auto j = nlohmann::json::parse(line);
    ran.insert(j["task_id"].get<std::string>());
    if (j["task_type"] == "send_email") keyed_order.push_back(j["task_id"].get<std::string>());
  }
  EXPECT_EQ(ran, std::set<std::string>(in_partition.begin(), in_partition.end()));
  EXPECT_EQ(keyed_order, std::vector<std::string>(in_partition.begin(), in_partition.begin() + 3));
  for (int i = 0; i < kParts; ++i) {
    if (i == keyed) continue;
    EXPECT_EQ(client.integer({"XLEN", detail::partition_stream(stream, kParts, i)}), 1) << "partition " << i;
  }

  // The other way: the seed's producer writes into one partition; a worker of all of them runs it.
  const std::string other = detail::partition_stream(stream, kParts, (keyed + 1) % kParts);
  const std::string produced =
      run("/usr/bin/python3 " + seed_script() + " produce " + server.url() + " '" + other + "' 5", status);
  ASSERT_EQ(status, 0) << produced;
  // A worker of the seed's group (streamq runs one group per queue: a consumer of another group
  // is refused while the seed's is on the partition) runs the rest; the four the seed ran and
  // acknowledged (without deleting them) are not handed out again.
  std::set<std::string> expected = elsewhere;
  for (const std::string& id : lines(produced)) expected.insert(id);
  ASSERT_EQ(expected.size(), 7u);
  std::mutex m;
  std::set<std::string> seen;
  ConsumerOptions o{
      .connection = {.url = server.url()}, .stream = stream, .group = "seed-workers", .block = 200ms};
  o.concurrency = kParts;
  o.partitions = kParts;
  RunningConsumer rc(o, [&](Consumer& c) {
    for (const char* type : {"send_email", "reindex"}) {
      c.on(type, [&](const Task& t) {
        std::lock_guard lock(m);
        seen.insert(t.id());
      });
    }
  });
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return seen.size() >= expected.size();
  }));
  rc.stop();
  EXPECT_EQ(seen, expected);
}

TEST_F(InteropTest, SeedPythonConsumerRunsNormalPriorityTasksAndLeavesTheOtherLevels) {
  // Normal priority stays in the seed's stream; other levels are in sibling streams the seed
  // never reads.
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string urgent =
      producer.enqueue("send_email", nlohmann::json{{"to", "vip@b.c"}}, {.priority = Priority::high});
  const std::string a =
      producer.enqueue("send_email", nlohmann::json{{"to", "a@b.c"}}, {.priority = Priority::normal});
  const std::string slow =
      producer.enqueue("reindex", nlohmann::json::array({1}), {.priority = Priority::low});
  const std::string b = producer.enqueue("send_email", nlohmann::json{{"to", "b@b.c"}});
  int status = -1;
  const std::string out =
      run("/usr/bin/python3 " + seed_script() + " consume " + server.url() + " '" + stream + "' 2", status);
  ASSERT_EQ(status, 0) << out;
  const auto got = lines(out);
  ASSERT_EQ(got.size(), 2u) << out;
  EXPECT_EQ(nlohmann::json::parse(got[0])["task_id"], a);
  EXPECT_EQ(nlohmann::json::parse(got[1])["task_id"], b);
  EXPECT_EQ(client.integer({"XLEN", stream + ":p:high"}), 1);
  EXPECT_EQ(client.integer({"XLEN", stream + ":p:low"}), 1);
  // A streamq worker of the seed's group runs what the seed left, the high one first. (A worker
  // of another group would be right to run the two normal tasks again: the seed acks its
  // entries but does not delete them, and every group sees every entry.)
  std::mutex m;
  std::vector<std::string> seen;
  RunningConsumer rc({.connection = {.url = server.url()},
                      .stream = stream,
                      .group = "seed-workers",
                      .concurrency = 1,
                      .block = 200ms},
                     [&](Consumer& c) {
                       c.on_unknown([&](const Task& t) {
                         std::lock_guard lock(m);
                         seen.push_back(t.id());
                       });
                     });
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return seen.size() >= 2;
  }));
  // Nothing else is run: the normal tasks the seed handled are not handed out again.
  EXPECT_FALSE(wait_until(
      [&] {
        std::lock_guard lock(m);
        return seen.size() > 2;
      },
      500ms));
  rc.stop();
  EXPECT_EQ(seen, (std::vector<std::string>{urgent, slow}));
}

TEST_F(InteropTest, SeedPythonProducerFeedsAWorkerServingPriorities) {
  // The seed writes to the queue's stream: a streamq worker runs those tasks as normal ones,
  // after high ones and before low ones.
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  producer.enqueue("reindex", nlohmann::json::array({1}), {.priority = Priority::low});
  int status = -1;
  const std::string out =
      run("/usr/bin/python3 " + seed_script() + " produce " + server.url() + " '" + stream + "' 5", status);
  ASSERT_EQ(status, 0) << out;
  producer.enqueue("reindex", nlohmann::json::array({2}), {.priority = Priority::high});
  std::mutex m;
  std::vector<std::string> types;
  RunningConsumer rc(
      {.connection = {.url = server.url()}, .stream = stream, .concurrency = 1, .block = 200ms},
      [&](Consumer& c) {
        c.on_unknown([&](const Task& t) {
          std::lock_guard lock(m);
          types.push_back(t.type() + (t.type() == "reindex" ? t.json().dump() : ""));
        });
      });
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return types.size() == 7;
  }));
  rc.stop();
  EXPECT_EQ(types.front(), "reindex[2]");
  EXPECT_EQ(types.back(), "reindex[1]");
  for (std::size_t i = 1; i + 1 < types.size(); ++i) EXPECT_EQ(types[i], "send_email");
}

}  // namespace
}  // namespace streamq::test
