// SPDX-License-Identifier: MIT
// Odd names: stream, group and consumer names and task types with
// spaces, newlines, braces, quotes, a NUL byte, non-ASCII text or 1 KB of length go through
// enqueue, delay, run, retry, dead letter, Stats and the Inspector unchanged: every command is
// sent as binary-safe arguments, never as text a name could break.
#include <atomic>
#include <cctype>
#include <chrono>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

struct Odd {
  const char* what;
  std::string text;
};

void PrintTo(const Odd& o, std::ostream* os) { *os << o.what; }

std::vector<Odd> odd_names() {
  return {
      {"spaces", "name with spaces"},   {"newline and tab", "line one\nline two\tend"},
      {"braces", "{tag}x{y}"},          {"quotes", "it's \"quoted\" \\ back"},
      {"non-ASCII", "заказы 订单 ✓"},   {"NUL byte", std::string("nul\0inside", 10)},
      {"1 KB", std::string(1024, 'k')},
  };
}

class Names : public ::testing::TestWithParam<Odd> {
 protected:
  RedisServer server;
  Client client{server.url()};
};

TEST_P(Names, GoThroughEveryPathUnchanged) {
  const std::string odd = GetParam().text;
  const std::string stream = "q:" + odd;
  const std::string type = "type:" + odd;
  Producer p({.connection = {.url = server.url()}, .stream = stream});
  const std::string now_id = p.enqueue(type, R"({"n":1})");
  const std::string later_id = p.enqueue(type, R"({"n":2})", {.delay = 200ms});
  const std::string failing_id = p.enqueue(type, R"({"n":3})", {.max_retries = 1});
  ConsumerOptions o{.connection = {.url = server.url()},
                    .stream = stream,
                    .group = "group:" + odd,
                    .consumer_name = "consumer:" + odd};
  o.retry_backoff = {.base = 20ms, .cap = 20ms};
  std::atomic<int> done{0};
  std::atomic<int> failures{0};
  std::atomic<int> other_type{0};
  RunningConsumer w(o, [&](Consumer& c) {
    c.on(type, [&](const Task& t) {
      if (t.type() != type) ++other_type;
      if (t.json()["n"] == 3) {
        ++failures;
        throw std::runtime_error("failed: " + odd);
      }
      ++done;
    });
  });
  ASSERT_TRUE(wait_until([&] { return done.load() == 2 && client.integer({"XLEN", stream + ":dlq"}) == 1; }));
  w.stop();
  EXPECT_EQ(other_type.load(), 0);
  EXPECT_EQ(failures.load(), 2);
  const auto dead = client.xrange(stream + ":dlq");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(Client::get(dead[0].second, "task_id"), failing_id);
  EXPECT_EQ(Client::get(dead[0].second, "consumer"), "consumer:" + odd);
  // The error is the exception's what(): a C string, so it ends at a NUL byte.
  EXPECT_EQ(Client::get(dead[0].second, "error"), std::string(("failed: " + odd).c_str()));

  StatsReader stats({.connection = {.url = server.url()}, .stream = stream, .group = "group:" + odd});
  const QueueStats s = stats.read();
  EXPECT_EQ(s.stream, stream);
  EXPECT_EQ(s.length, 0);
  EXPECT_EQ(s.dlq_length, 1);
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0].name, "group:" + odd);
  ASSERT_EQ(s.groups[0].consumers.size(), 1u);
  EXPECT_EQ(s.groups[0].consumers[0].name, "consumer:" + odd);
  EXPECT_NE(s.to_json().find("\"stream\""), std::string::npos);
  (void)s.to_prometheus();  // escapes the labels

  Inspector in({.connection = {.url = server.url()}, .group = "group:" + odd});
  bool listed = false;
  for (const QueueInfo& q : in.queues()) listed = listed || q.name == stream;
  EXPECT_TRUE(listed);
  EXPECT_EQ(in.replay(stream).done, 1);
  const std::optional<TaskInfo> back = in.task(stream, failing_id);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->task_type(), type);
  EXPECT_EQ(back->state, TaskState::queued);
  (void)now_id;
  (void)later_id;
}

INSTANTIATE_TEST_SUITE_P(Odd, Names, ::testing::ValuesIn(odd_names()), [](const auto& info) {
  std::string n = info.param.what;
  for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) != 0 ? c : '_';
  return n;
});

}  // namespace
}  // namespace streamq::test
