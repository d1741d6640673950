// SPDX-License-Identifier: MIT
// Handlers: a worker runs every task once, also those enqueued before it started, and deletes
// it; a typed handler gets the typed payload, and a payload that does not convert is
// dead-lettered without a retry; a task type without a handler is dead-lettered or goes to the
// fallback; many handler threads run each task once.
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "typed_payload.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(ConsumerTest, RunsTasksEnqueuedBeforeTheFirstWorkerAndDeletesThem) {
  auto p = producer();
  std::set<std::string> ids;
  for (int i = 0; i < 50; ++i) ids.insert(p.enqueue("send_email", nlohmann::json{{"i", i}}));
  std::mutex m;
  std::set<std::string> seen;
  std::atomic<int> bad_payload{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("send_email", [&](const Task& t) {
      if (!t.json().contains("i") || t.retry_count() != 0 || t.max_retries() != 3 || t.deliveries() != 1)
        ++bad_payload;
      std::lock_guard lock(m);
      seen.insert(t.id());
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(bad_payload, 0);
  EXPECT_EQ(rc.consumer().metrics().done, 50u);
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ConsumerTest, TypedHandlerGetsTheTypedPayload) {
  auto p = producer();
  const std::string id = p.enqueue("resize", Resize{.image = "cat.png", .width = 640});
  std::mutex m;
  std::vector<Resize> seen;
  std::vector<std::string> ids;
  std::atomic<int> short_form{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on<Resize>("resize", [&](const Resize& r, const Task& task) {
      std::lock_guard lock(m);
      seen.push_back(r);
      ids.push_back(task.id());
    });
    c.on<std::vector<int>>("sum", [&](const std::vector<int>& v) { short_form += v.at(0) + v.at(1); });
  });
  p.enqueue("sum", std::vector<int>{2, 3});
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 2; }));
  rc.stop();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (Resize{"cat.png", 640}));
  EXPECT_EQ(ids[0], id);
  EXPECT_EQ(short_form, 5);
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ConsumerTest, PayloadThatDoesNotConvertIsDeadLetteredNotRetried) {
  auto p = producer();
  p.enqueue("resize", R"({"image": "cat.png", "width": "wide"})", {.max_retries = 5});  // width not a number
  p.enqueue("resize", R"({"image": "dog.png"})", {.max_retries = 5});                   // width missing
  std::atomic<int> calls{0};
  RunningConsumer rc(
      options(), [&](Consumer& c) { c.on<Resize>("resize", [&](const Resize&, const Task&) { ++calls; }); });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 2 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(rc.consumer().metrics().retried, 0u);
  EXPECT_EQ(rc.consumer().metrics().dead_lettered, 2u);
  const auto entries = client.xrange(dlq);
  for (const auto& [entry_id, e] : entries) {
    EXPECT_EQ(Client::get(e, "reason"), "bad_payload");
    EXPECT_EQ(Client::get(e, "retry_count"), "0");
    EXPECT_NE(
        Client::get(e, "error").find("payload of task type \"resize\" does not convert: [json.exception."),
        std::string::npos)
        << Client::get(e, "error");
  }
  std::map<std::string, std::string> error_of;  // handler threads finish in any order
  for (const auto& [entry_id, e] : entries) error_of[Client::get(e, "payload")] = Client::get(e, "error");
  EXPECT_NE(error_of[R"({"image": "cat.png", "width": "wide"})"].find("type must be number"),
            std::string::npos);
  EXPECT_NE(error_of[R"({"image": "dog.png"})"].find("key 'width' not found"), std::string::npos);
}

TEST_F(ConsumerTest, UnknownTypeIsDeadLetteredOrGoesToTheFallback) {
  auto p = producer();
  p.enqueue("mystery", "{}");
  {
    RunningConsumer rc(options(), [](Consumer& c) { c.on("known", [](const Task&) {}); });
    ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }));
  }
  EXPECT_EQ(Client::get(client.xrange(dlq).at(0).second, "reason"), "no_handler");

  p.enqueue("mystery", "{}");
  std::atomic<int> fallback{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on_unknown([&](const Task&) { ++fallback; }); });
  ASSERT_TRUE(wait_until([&] { return fallback == 1 && xlen(stream) == 0; }));
  EXPECT_EQ(xlen(dlq), 1);
}

TEST_F(ConsumerTest, ManyHandlerThreadsRunEveryTaskOnce) {
  Producer p({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  std::vector<TaskSpec> batch;
  for (int i = 0; i < 5000; ++i) batch.push_back({"work", nlohmann::json{{"i", i}}.dump()});
  p.enqueue_batch(batch);
  std::vector<std::atomic<int>> counts(5000);
  auto o = options();
  o.concurrency = 8;
  o.prefetch = 64;
  RunningConsumer rc(
      o, [&](Consumer& c) { c.on("work", [&](const Task& t) { counts[t.json()["i"].get<int>()]++; }); });
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }, 60s));
  rc.stop();
  for (int i = 0; i < 5000; ++i) EXPECT_EQ(counts[i].load(), 1) << i;
}

}  // namespace
}  // namespace streamq::test
