// SPDX-License-Identifier: MIT
// Redis failing under producers and workers: killed and restarted on its AOF (delayed tasks
// and every acknowledged enqueue survive), stopped for ten seconds, full at maxmemory with
// noeviction (enqueues refused with OOM, nothing whose enqueue returned lost); and a worker's
// warning at start when the server may evict keys.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "log_capture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST(Reliability, DelayedTasksSurviveARedisKillWithAof) {
  RedisServer server({.appendonly = true});
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  std::vector<TaskSpec> batch(500,
                              TaskSpec{.task_type = "work", .payload = "{}", .options = {.delay = 1500ms}});
  const auto ids = producer.enqueue_batch(batch);
  server.restart();  // kill -9, then start on the same AOF
  Client after(server.url());
  ASSERT_EQ(after.integer({"ZCARD", stream + ":delayed"}), 500);
  EXPECT_EQ(after.integer({"XLEN", stream}), 0);
  WorkerProcess worker({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0"});
  ASSERT_TRUE(wait_until([&] { return after.integer({"HLEN", stream + ":done"}) == 500; }, 30s));
  const auto done = hash(after, stream + ":done");
  for (const auto& id : ids) EXPECT_EQ(done.count(id) ? done.at(id) : 0, 1) << id;
  EXPECT_EQ(after.integer({"ZCARD", stream + ":delayed"}), 0);
}

TEST(Reliability, RedisKilledAndRestartedWithAofLosesNothingAcknowledged) {
  RedisServer server({.appendonly = true});
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string done_key = stream + ":done";
  constexpr int kTasks = 3000;

  std::atomic<int> handled{0};
  ConsumerOptions options{.connection = {.url = server.url(), .backoff_base = 20ms, .backoff_max = 500ms},
                          .stream = stream,
                          .block = 200ms};
  RunningConsumer rc(options, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      thread_local std::unique_ptr<Client> recorder;
      if (!recorder) recorder = std::make_unique<Client>(server.url());
      try {
        recorder->cmd({"HINCRBY", done_key, t.id(), "1"}).view().check();
      } catch (...) {
        recorder.reset();  // a dead context is never reused
        throw;             // not recorded: let streamq retry it
      }
      ++handled;
    });
  });

  Producer producer({.connection = {.url = server.url(), .backoff_base = 20ms, .backoff_max = 500ms},
                     .stream = stream,
                     .max_len = 100000});
  std::vector<std::string> acked, indeterminate;
  for (int i = 0; i < kTasks; ++i) {
    if (i == kTasks / 3 || i == kTasks / 2) server.restart();  // kill -9, then start on the same AOF
    const std::string id = "task-" + std::to_string(i);
    try {
      producer.enqueue("work", "{}", {.task_id = id, .max_retries = 100});
      acked.push_back(id);
    } catch (const ConnectionError&) {
      indeterminate.push_back(id);  // the write may or may not have reached the AOF
    }
  }
  ASSERT_TRUE(wait_until(
      [&] {
        try {
          // A handler whose record failed with the restart throws: its retry waits out the
          // default backoff in the delayed set, which must be empty too.
          return client.integer({"XLEN", stream}) == 0 && pending(client, stream) == 0 &&
                 client.integer({"ZCARD", stream + ":delayed"}) == 0;
        } catch (const ConnectionError&) {
          return false;
        }
      },
      60s))
      << "XLEN " << client.integer({"XLEN", stream}) << ", pending " << pending(client, stream)
      << ", handled " << handled << ", done " << rc.consumer().metrics().done;
  rc.stop();
  Client after(server.url());
  const auto done = hash(after, done_key);
  for (const auto& id : acked) EXPECT_TRUE(done.count(id)) << "acknowledged task lost: " << id;
  for (const auto& [id, n] : done) EXPECT_TRUE(id.starts_with("task-")) << "unexpected " << id;
  EXPECT_EQ(after.integer({"XLEN", stream + ":dlq"}), 0);
  EXPECT_GE(rc.consumer().metrics().reconnects, 2u);
  // Each restart costs the producer the call in flight on the dead socket (its outcome is
  // unknown) and perhaps one more while it reconnects; after that it enqueues again.
  EXPECT_LE(indeterminate.size(), 4u);
  EXPECT_EQ(acked.size() + indeterminate.size(), static_cast<std::size_t>(kTasks));
  EXPECT_TRUE(!acked.empty() && acked.back() == "task-" + std::to_string(kTasks - 1));
  std::printf("acked=%zu indeterminate=%zu done=%zu\n", acked.size(), indeterminate.size(), done.size());
}

// A stalled Redis: the server SIGSTOPped for 10 s under a running worker and producer.
// Commands time out (socket_timeout 2 s), the clients reconnect after SIGCONT, and every task
// whose enqueue returned is run; nothing is lost.
TEST(Reliability, AServerStoppedForTenSecondsLosesNothing) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  std::mutex m;
  std::set<std::string> ran;
  std::set<std::string> enqueued;
  ConsumerOptions o{.connection = {.url = server.url(), .socket_timeout = 2s}, .stream = stream};
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      std::lock_guard lock(m);
      ran.insert(t.id());
    });
  });
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::thread feeder([&] {
    Producer p({.connection = {.url = server.url(), .socket_timeout = 2s}, .stream = stream});
    while (!stop) {
      try {
        const std::string id = p.enqueue("work", "{}");
        std::lock_guard lock(m);
        enqueued.insert(id);
      } catch (const Error&) {
        ++refused;  // timed out or not connected: not enqueued as far as the caller knows
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  std::this_thread::sleep_for(500ms);
  server.pause();
  std::this_thread::sleep_for(10s);
  server.resume();
  std::this_thread::sleep_for(1s);
  stop = true;
  feeder.join();
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard lock(m);
        return std::includes(ran.begin(), ran.end(), enqueued.begin(), enqueued.end());
      },
      30s))
      << "tasks whose enqueue returned were not run";
  worker.stop();
  EXPECT_GT(refused.load(), 0) << "the stall was not seen";
  EXPECT_EQ(client.integer({"XLEN", stream + ":dlq"}), 0);
  EXPECT_EQ(pending(client, stream), 0);
  std::printf("enqueued=%zu refused=%d ran=%zu\n", enqueued.size(), refused.load(), ran.size());
}

// Out of memory: Redis at maxmemory with noeviction. Enqueue fails with a ReplyError whose
// code is OOM (nothing written); workers keep acknowledging and deleting, which frees memory;
// retries and dead letters, refused while it is full, are written again until they fit; nothing
// whose enqueue returned is lost.
TEST(Reliability, AFullServerRefusesEnqueuesAndLosesNothing) {
  RedisServer server({.extra = {"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}});
  Client client(server.url());
  const std::string stream = unique_key();
  ConsumerOptions o{.connection = {.url = server.url()}, .stream = stream};
  o.retry_backoff = {.base = 0ms, .cap = 0ms};
  {
    // The queue's workers ran before it filled up: its level streams and groups exist. (A
    // consumer's first start on a full server cannot create them; see docs/operations.md, "Memory".)
    RunningConsumer first(o, [](Consumer&) {});
    ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stream + ":p:low"}) == 1; }));
  }
  Producer p({.connection = {.url = server.url()}, .stream = stream, .max_len = 1000000});
  const std::string filler(2000, 'x');
  std::vector<std::string> ok_ids, failing_ids;
  std::string refusal, refusal_code;
  for (int i = 0; i < 100000 && refusal.empty(); ++i) {
    try {
      const bool fails = i % 10 == 0;
      const std::string id =
          p.enqueue(fails ? "fails" : "work", nlohmann::json{{"pad", filler}}, {.max_retries = 1});
      (fails ? failing_ids : ok_ids).push_back(id);
    } catch (const ReplyError& e) {
      refusal = e.what();
      refusal_code = std::string(e.prefix());  // Redis 6.2 wraps it: "ERR Error running script ... -OOM ..."
    }
  }
  ASSERT_FALSE(refusal.empty()) << "the server never filled up";
  EXPECT_EQ(refusal_code, "OOM") << refusal;
  const std::int64_t queued = client.integer({"XLEN", stream});
  EXPECT_EQ(queued, static_cast<std::int64_t>(ok_ids.size() + failing_ids.size()))
      << "a refused enqueue wrote nothing";

  std::mutex m;
  std::map<std::string, int> runs;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      std::lock_guard lock(m);
      ++runs[t.id()];
    });
    c.on("fails", [&](const Task& t) {
      {
        std::lock_guard lock(m);
        ++runs[t.id()];
      }
      throw std::runtime_error("no");
    });
  });
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"XLEN", stream}) == 0 && pending(client, stream) == 0 &&
               client.integer({"XLEN", stream + ":dlq"}) == static_cast<std::int64_t>(failing_ids.size());
      },
      60s))
      << "left " << client.integer({"XLEN", stream}) << ", dead "
      << client.integer({"XLEN", stream + ":dlq"});
  worker.stop();
  for (const auto& id : ok_ids) EXPECT_EQ(runs[id], 1) << id;
  for (const auto& id : failing_ids) EXPECT_EQ(runs[id], 2) << id << ": its attempt and one retry";
  std::printf("enqueued=%zu before OOM\n", ok_ids.size() + failing_ids.size());
}

// Out of memory with a policy that evicts: the consumer says so at start (its user may run
// INFO here; `streamq doctor` is the check for users that may not).
// A consumer that never ran on its queue starts on a full server: it cannot create the queue's
// streams and group (XGROUP CREATE is refused with OOM), so it keeps trying, without ending
// run(), and once there is room it creates them and runs what is enqueued.
TEST(Reliability, AFirstStartOnAFullServerRetriesUntilThereIsRoom) {
  RedisServer server({.extra = {"--maxmemory-policy", "noeviction"}});
  Client client(server.url());
  const std::string stream = unique_key();
  // Full for good: 3 MB of data, and a limit of 1 MB (a server filled to its limit would take
  // small writes again once a refused command's buffer is freed).
  const std::string filler(100000, 'x');
  for (int i = 0; i < 30; ++i)
    client.cmd({"SET", stream + ":filler:" + std::to_string(i), filler}).view().check();
  client.cmd({"CONFIG", "SET", "maxmemory", "1mb"}).view().check();
  ASSERT_TRUE(client.cmd({"SET", stream + ":probe", "x"}).view().is_error()) << "the server is not full";
  LogCapture log(LogLevel::info);  // (it outlives the worker, which logs to it)
  std::atomic<int> ran{0};
  RunningConsumer worker({.connection = {.url = server.url()}, .stream = stream},
                         [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  // ("start: OOM command not allowed when used memory > 'maxmemory'. ...; retrying in 68 ms";
  // Redis 6.2 words a script's OOM as "ERR Error running script ... -OOM ...")
  const auto refusals = [&] {
    int n = 0;
    for (const auto& [level, line] : log.lines()) {
      n += line.starts_with("start: ") && line.find("OOM") != std::string::npos &&
           line.find("retrying") != std::string::npos;
    }
    return n;
  };
  ASSERT_TRUE(wait_until([&] { return refusals() >= 2; }, 10s))
      << "the group's creation was not refused and retried";
  EXPECT_FALSE(worker.finished()) << "run() ended on the full server";
  EXPECT_EQ(client.integer({"EXISTS", stream}), 0);
  client.cmd({"CONFIG", "SET", "maxmemory", "0"}).view().check();  // room again
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"EXISTS", stream + ":p:low"}) == 1;
      },
      20s))
      << "the queue's streams were not created once there was room";
  Producer p({.connection = {.url = server.url()}, .stream = stream});
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran.load() == 1; }, 10s));
  EXPECT_FALSE(worker.finished());
}

// A consumer whose queue exists starts on a full server: the write of its name is refused, and
// it starts without the name (a full queue must drain), then takes the name at a later renewal
// once the server takes writes again.
TEST(Reliability, AStartOnAFullServerRunsWithoutItsNameAndTakesItOnceThereIsRoom) {
  RedisServer server({.extra = {"--maxmemory-policy", "noeviction"}});
  Client client(server.url());
  const std::string stream = unique_key();
  ConsumerOptions o{.connection = {.url = server.url()}, .stream = stream};
  o.consumer_name = "w1";
  o.heartbeat_interval = 200ms;
  const std::string name_key = detail::live_key(stream, "workers", "w1");
  {
    RunningConsumer first(o, [](Consumer&) {});  // the queue's streams and group exist
    ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stream + ":p:low"}) == 1; }));
  }
  Producer p({.connection = {.url = server.url()}, .stream = stream});
  p.enqueue("work", "{}");
  const std::string filler(100000, 'x');
  for (int i = 0; i < 30; ++i)
    client.cmd({"SET", stream + ":filler:" + std::to_string(i), filler}).view().check();
  client.cmd({"CONFIG", "SET", "maxmemory", "1mb"}).view().check();  // full for good (see above)
  LogCapture log(LogLevel::info);  // (it outlives the worker, which logs to it)
  std::atomic<int> ran{0};
  RunningConsumer worker(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return ran.load() == 1; }, 10s)) << "the full queue did not drain";
  EXPECT_EQ(log.count(LogLevel::warning, "starting without it, and taking it when the server allows"), 1U);
  EXPECT_EQ(client.integer({"EXISTS", name_key}), 0);
  client.cmd({"CONFIG", "SET", "maxmemory", "0"}).view().check();  // room again
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"EXISTS", name_key}) == 1;
      },
      10s))
      << "the name was not taken at a renewal";
  EXPECT_FALSE(worker.finished());
}

TEST(Reliability, AConsumerWarnsAtStartWhenTheServerMayEvictKeys) {
  RedisServer server({.extra = {"--maxmemory-policy", "allkeys-lru"}});
  LogCapture logs(LogLevel::info);
  ConsumerOptions o{.connection = {.url = server.url()}, .stream = unique_key()};
  RunningConsumer w(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
  ASSERT_TRUE(
      wait_until([&] { return logs.count(LogLevel::warning, "has maxmemory-policy allkeys-lru") >= 1; }));
  w.stop();
  RedisServer safe;
  LogCapture quiet(LogLevel::info);
  o.connection.url = safe.url();
  RunningConsumer ok(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
  ASSERT_TRUE(wait_until([&] { return quiet.count(LogLevel::info, "running on") == 1; }));
  EXPECT_EQ(quiet.count(LogLevel::warning, "maxmemory-policy"), 0u);
}

}  // namespace
}  // namespace streamq::test
