// SPDX-License-Identifier: MIT
// Consumer behaviour on a real server: completion, retries, dead letters, recovery, leases,
// shutdown, hostile input.
#include <atomic>
#include <chrono>
#include <condition_variable>
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
using Fields = std::vector<std::pair<std::string, std::string>>;

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

TEST_F(ConsumerTest, FailingHandlerIsRetriedThenDeadLettered) {
  auto p = producer();
  const std::string id = p.enqueue("flaky", R"({"x":1})", {.max_retries = 2});
  std::atomic<int> calls{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      EXPECT_EQ(t.retry_count(), calls.load());
      ++calls;
      throw std::runtime_error("smtp down #" + std::to_string(calls.load()));
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && xlen(stream) == 0 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(calls, 3);  // first attempt + 2 retries
  const auto e = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(e, "task_id"), id);
  EXPECT_EQ(Client::get(e, "payload"), R"({"x":1})");
  EXPECT_EQ(Client::get(e, "retry_count"), "2");
  EXPECT_EQ(Client::get(e, "error"), "smtp down #3");
  EXPECT_EQ(Client::get(e, "last_error"), "smtp down #2");
  EXPECT_EQ(Client::get(e, "reason"), "retries_exhausted");
  EXPECT_EQ(Client::get(e, "consumer"), rc.consumer().name());
  EXPECT_FALSE(Client::get(e, "original_id").empty());
  EXPECT_FALSE(Client::get(e, "failed_at").empty());
  EXPECT_EQ(rc.consumer().metrics().retried, 2u);
  EXPECT_EQ(rc.consumer().metrics().dead_lettered, 1u);
}

TEST_F(ConsumerTest, PermanentErrorDeadLettersAtOnce) {
  producer().enqueue("charge", "{}");
  std::atomic<int> calls{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("charge", [&](const Task&) {
      ++calls;
      throw PermanentError("card declined");
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(calls, 1);
  const auto e = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(e, "reason"), "permanent");
  EXPECT_EQ(Client::get(e, "error"), "card declined");
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

TEST_F(ConsumerTest, DeadWorkersEntriesAreReclaimedByAnother) {
  auto p = producer();
  for (int i = 0; i < 20; ++i) p.enqueue("work", "{}");
  const auto ids = read_as("dead-worker", 20);
  ASSERT_EQ(ids.size(), 20u);
  std::mutex m;
  std::vector<std::int64_t> deliveries;
  auto o = options();
  o.claim_min_idle = 600ms;
  o.heartbeat_interval = 200ms;
  o.reclaim_interval = 100ms;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      std::lock_guard lock(m);
      deliveries.push_back(t.deliveries());
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }));
  rc.stop();
  ASSERT_EQ(deliveries.size(), 20u);
  for (auto d : deliveries) EXPECT_EQ(d, 2);
  EXPECT_EQ(rc.consumer().metrics().reclaimed, 20u);
  EXPECT_EQ(rc.consumer().metrics().replayed, 0u);  // taken from another consumer: not a replay
}

TEST_F(ConsumerTest, SameNameRestartReplaysOwnPendingAtOnceAndDeadLettersLostBodies) {
  auto p = producer();
  for (int i = 0; i < 5; ++i) p.enqueue("work", "{}");
  const auto ids = read_as("slot-1", 5);
  client.cmd({"XDEL", stream, ids[1], ids[3]});  // trimmed while pending
  std::atomic<int> ran{0};
  auto o = options();
  o.consumer_name = "slot-1";  // claim_min_idle stays 30 s: only the replay can run them now
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return ran == 3 && pending() == 0 && xlen(dlq) == 2; }));
  rc.stop();
  EXPECT_EQ(rc.consumer().metrics().replayed, 3u);
  EXPECT_EQ(rc.consumer().metrics().reclaimed, 0u);  // its own entries: not taken from anyone
  EXPECT_EQ(rc.consumer().metrics().dead_lettered, 2u);
  for (const auto& [id, f] : client.xrange(dlq)) {
    EXPECT_EQ(Client::get(f, "reason"), "body_lost");
    EXPECT_TRUE(Client::get(f, "original_id") == ids[1] || Client::get(f, "original_id") == ids[3]);
  }
}

TEST_F(ConsumerTest, ReclaimDeadLettersTrimmedBodiesAndPoisonBeforeRunning) {
  auto p = producer();
  for (int i = 0; i < 6; ++i) p.enqueue("work", "{}");
  const auto ids = read_as("dead-worker", 6);
  client.cmd({"XDEL", stream, ids[0], ids[1]});
  // ids[2] was delivered 3 times already (two crashed attempts after the first).
  client.cmd({"XCLAIM", stream, "workers", "dead-2", "0", ids[2]});
  client.cmd({"XCLAIM", stream, "workers", "dead-3", "0", ids[2]});
  std::mutex m;
  std::set<std::string> ran;
  auto o = options();
  o.claim_min_idle = 300ms;
  o.heartbeat_interval = 100ms;
  o.reclaim_interval = 100ms;
  o.max_deliveries = 3;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      std::lock_guard lock(m);
      ran.insert(t.entry_id());
    });
  });
  ASSERT_TRUE(wait_until([&] { return pending() == 0 && xlen(dlq) == 3; }));
  rc.stop();
  EXPECT_EQ(ran, (std::set<std::string>{ids[3], ids[4], ids[5]}));
  std::map<std::string, std::string> reasons;
  for (const auto& [id, f] : client.xrange(dlq))
    reasons[Client::get(f, "original_id")] = Client::get(f, "reason");
  EXPECT_EQ(reasons[ids[0]], "body_lost");
  EXPECT_EQ(reasons[ids[1]], "body_lost");
  EXPECT_EQ(reasons[ids[2]], "max_deliveries");
}

TEST_F(ConsumerTest, LongTaskKeepsItsLeaseAndRunsOnce) {
  const std::string id = producer().enqueue("long", "{}");
  std::atomic<int> runs{0};
  auto o = options();
  o.claim_min_idle = 600ms;
  o.heartbeat_interval = 150ms;
  o.reclaim_interval = 50ms;
  std::atomic<bool> started{false};
  auto setup = [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      ++runs;
      started = true;
      EXPECT_EQ(t.deliveries(), 1);
      std::this_thread::sleep_for(2500ms);  // the long task itself: four times claim_min_idle
    });
  };
  RunningConsumer a(o, setup);
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  // Three more workers, all trying to reclaim every 50 ms.
  RunningConsumer b(o, setup), c(o, setup), d(o, setup);
  // done is counted when the ack's reply is read, which may be just after Redis applied it.
  ASSERT_TRUE(
      wait_until([&] { return xlen(stream) == 0 && pending() == 0 && a.consumer().metrics().done == 1; }));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(
      b.consumer().metrics().reclaimed + c.consumer().metrics().reclaimed + d.consumer().metrics().reclaimed,
      0u);
}

TEST_F(ConsumerTest, RecreatesDeletedGroupAndStream) {
  auto p = producer();
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 1; }));
  client.cmd({"XGROUP", "DESTROY", stream, "workers"}).view().check();
  ASSERT_TRUE(wait_until([&] { return client.cmd({"XINFO", "GROUPS", stream}).view().size() == 1; }));
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 2; }));
  client.cmd({"DEL", stream});
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stream}) == 1; }));
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 3; }));
  // No hot loop while it recovered: a handful of commands, not thousands. Redis 7.0 counts
  // XGROUP CREATE on its own; 6.2 counts every XGROUP subcommand (this test's DESTROY too).
  const std::string info(client.cmd({"INFO", "commandstats"}).view().str());
  std::size_t pos = std::string::npos;
  for (const std::string key : {"cmdstat_xgroup|create:calls=", "cmdstat_xgroup:calls="}) {
    if (pos = info.find(key); pos != std::string::npos) {
      pos += key.size();
      break;
    }
  }
  ASSERT_NE(pos, std::string::npos) << info;
  EXPECT_LT(std::stoi(info.substr(pos)), 20);
}

TEST_F(ConsumerTest, StopReturnsPromptlyFromABlockingRead) {
  auto o = options();
  o.block = 10s;
  o.connection.socket_timeout = 12s;
  RunningConsumer rc(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
  ASSERT_TRUE(wait_until([&] {
    return std::string(client.cmd({"CLIENT", "LIST"}).view().str()).find("cmd=xreadgroup") !=
           std::string::npos;
  }));
  const auto start = std::chrono::steady_clock::now();
  rc.stop();
  // Without CLIENT UNBLOCK this would take up to the 10 s BLOCK.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(ConsumerTest, GracefulShutdownFinishesRunningAndReleasesTheRest) {
  auto p = producer();
  for (int i = 0; i < 12; ++i) p.enqueue("work", "{}");
  std::atomic<int> started{0}, finished{0};
  auto o = options();
  o.concurrency = 4;
  o.prefetch = 12;
  o.shutdown_grace = 5s;
  {
    RunningConsumer rc(o, [&](Consumer& c) {
      c.on("work", [&](const Task&) {
        ++started;
        std::this_thread::sleep_for(300ms);  // the task's own work
        ++finished;
      });
    });
    ASSERT_TRUE(wait_until([&] { return started >= 4; }));
    rc.stop();
    EXPECT_EQ(started, finished);  // every started handler ran to its end
    EXPECT_EQ(rc.consumer().metrics().done, static_cast<std::uint64_t>(finished.load()));
  }
  const int done_first = finished;
  EXPECT_LT(done_first, 12);
  EXPECT_EQ(xlen(stream), 12 - done_first);
  // The rest were released: a new worker (default claim_min_idle of 30 s) takes them at once,
  // and as they never ran, this is their first attempt.
  std::atomic<int> second{0}, not_first{0};
  RunningConsumer rc2(options(), [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      ++second;
      if (t.deliveries() != 1) ++not_first;
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }));
  EXPECT_EQ(second, 12 - done_first);
  EXPECT_EQ(not_first, 0);
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
