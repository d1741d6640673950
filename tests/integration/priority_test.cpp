// SPDX-License-Identifier: MIT
// Priority levels on a real server: strict order, a high task overtaking a normal backlog,
// weighted order, retries, reclaim and stats across the levels' streams.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "gate.hpp"
#include "log_capture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class PriorityTest : public ConsumerTest {
 protected:
  std::string high = stream + ":p:high";
  std::string low = stream + ":p:low";

  Producer big_producer() const {
    return Producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  }
  /// Enqueues `n` tasks of type "work" at `p`, each with its level's name in the payload.
  static void enqueue_many(Producer& producer, Priority p, int n) {
    const char* name = p == Priority::high ? "high" : p == Priority::low ? "low" : "normal";
    std::vector<TaskSpec> tasks;
    for (int i = 0; i < n; ++i) {
      tasks.push_back({"work", nlohmann::json{{"level", name}, {"i", i}}, {.priority = p}});
    }
    producer.enqueue_batch(tasks);
  }
  /// The level of every "work" task (the first letter of its payload's "level": 'h', 'n',
  /// 'l'), in the order the handlers start them.
  class StartLog {
   public:
    /// Registers the recording "work" handler (for RunningConsumer's setup).
    std::function<void(Consumer&)> handler() {
      return [this](Consumer& c) {
        c.on("work", [this](const Task& t) {
          const char level = t.json()["level"].get<std::string>()[0];
          bool held = false;
          {
            std::lock_guard lock(m_);
            starts_.push_back(level);
            held = starts_.size() >= hold_from_;
          }
          if (held) held_.pass(t.id());
        });
      };
    }
    /// Handlers that start task number `n` or later wait there until held().open().
    void hold_from(std::size_t n) {
      std::lock_guard lock(m_);
      hold_from_ = n;
    }
    Gate& held() { return held_; }
    std::size_t size() {
      std::lock_guard lock(m_);
      return starts_.size();
    }
    std::vector<char> starts() {
      std::lock_guard lock(m_);
      return starts_;
    }

   private:
    std::mutex m_;
    std::vector<char> starts_;
    std::size_t hold_from_ = std::numeric_limits<std::size_t>::max();
    Gate held_;
  };
};

TEST_F(PriorityTest, EnqueuedLevelsLiveInTheirOwnStreams) {
  auto p = producer();
  p.enqueue("work", "{}", {.priority = Priority::high});
  p.enqueue("work", "{}", {.priority = Priority::high});
  p.enqueue("work", "{}");
  p.enqueue("work", "{}", {.priority = Priority::low});
  EXPECT_EQ(xlen(high), 2);
  EXPECT_EQ(xlen(stream), 1);
  EXPECT_EQ(xlen(low), 1);
}

TEST_F(PriorityTest, StrictOrderRunsEveryHighTaskBeforeNormalBeforeLow) {
  auto p = big_producer();
  // Enqueued least important first, so order of arrival cannot explain the result.
  enqueue_many(p, Priority::low, 150);
  enqueue_many(p, Priority::normal, 150);
  enqueue_many(p, Priority::high, 150);
  StartLog log;
  auto o = options();
  o.concurrency = 1;
  RunningConsumer rc(o, log.handler());
  ASSERT_TRUE(wait_until([&] { return log.size() == 450; }));
  rc.stop();
  const std::vector<char> started = log.starts();
  for (std::size_t i = 0; i < started.size(); ++i) {
    const char want = i < 150 ? 'h' : i < 300 ? 'n' : 'l';
    ASSERT_EQ(started[i], want) << "start #" << i;
  }
  EXPECT_EQ(xlen(high) + xlen(stream) + xlen(low), 0);
}

TEST_F(PriorityTest, HighTaskOvertakesANormalBacklog) {
  auto p = big_producer();
  enqueue_many(p, Priority::normal, 2000);
  std::mutex m;
  std::condition_variable cv;
  bool gate_open = false;
  std::atomic<int> normal_started{0}, normal_done{0};
  std::atomic<int> normal_started_at_high{-1};
  // One handler thread: the order the handlers start in is then the order the consumer takes
  // the entries in. With several, the thread that took the high task can be descheduled before
  // its handler runs while the others start dozens of normal ones (seen under ASan and on a
  // loaded machine: 73 and 89 against the bound of 68), which measures the scheduler of the
  // machine, not the consumer's order.
  ConsumerOptions o = options();
  o.concurrency = 1;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("work", [&](const Task&) {
      ++normal_started;
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return gate_open; });
      ++normal_done;
    });
    c.on("urgent", [&](const Task&) { normal_started_at_high = normal_started.load(); });
  });
  // Every handler is busy with a normal task and the prefetch is full of normal ones.
  ASSERT_TRUE(wait_until([&] { return normal_started == o.concurrency; }));
  const int before = normal_started.load();
  p.enqueue("urgent", "{}", {.priority = Priority::high});
  {
    std::lock_guard lock(m);
    gate_open = true;
  }
  cv.notify_all();
  ASSERT_TRUE(wait_until([&] { return normal_started_at_high >= 0; }, 30s));
  const int overtaken_by = normal_started_at_high - before;
  EXPECT_LE(overtaken_by, o.prefetch + o.concurrency);
  ASSERT_TRUE(wait_until([&] { return normal_done == 2000; }, 60s));
  rc.stop();
  EXPECT_EQ(xlen(stream) + xlen(high), 0);
  std::printf("normal tasks started between the high enqueue and its start: %d (bound %d)\n", overtaken_by,
              o.prefetch + o.concurrency);
}

TEST_F(PriorityTest, WeightedOrderFollowsTheWeightsOverTenThousandTasks) {
  auto p = big_producer();
  // More of each level than the first 10,000 starts take, so every level stays backlogged.
  enqueue_many(p, Priority::high, 7000);
  enqueue_many(p, Priority::normal, 4000);
  enqueue_many(p, Priority::low, 2000);
  StartLog log;
  auto o = options();
  o.priority_weights = {6, 3, 1};
  RunningConsumer rc(o, log.handler());
  ASSERT_TRUE(wait_until([&] { return log.size() >= 10000; }, 120s));
  rc.stop();
  const std::vector<char> started = log.starts();
  int h = 0, n = 0, l = 0;
  for (std::size_t i = 0; i < 10000; ++i) {
    h += started[i] == 'h';
    n += started[i] == 'n';
    l += started[i] == 'l';
  }
  std::printf("first 10000 starts: high %d, normal %d, low %d (weights 6:3:1)\n", h, n, l);
  // Within two percentage points of 60/30/10.
  EXPECT_NEAR(h, 6000, 200);
  EXPECT_NEAR(n, 3000, 200);
  EXPECT_NEAR(l, 1000, 200);
}

TEST_F(PriorityTest, WeightedOrderStarvesNoLevelThatRefills) {
  auto p = big_producer();
  enqueue_many(p, Priority::normal, 3000);
  StartLog log;
  // The handlers wait at the 200th start until low is enqueued: on a loaded machine the
  // consumer could otherwise drain most of normal while the enqueue of low is on its way (seen
  // once in CI: the window below held 354 normal starts and 646 low, as if little of normal was
  // left when low came).
  log.hold_from(200);
  auto o = options();
  o.priority_weights = {6, 3, 1};
  RunningConsumer rc(o, log.handler());
  const auto release = log.held().opens_on_exit();
  // Low arrives while normal is being drained, after normal was served alone for a while: it
  // gets its share at once (not only once normal is empty), and normal is not held back to
  // pay for the time low was empty.
  ASSERT_TRUE(wait_until([&] { return log.size() >= 200; }));
  enqueue_many(p, Priority::low, 1000);
  const std::size_t at_low = log.size();
  ASSERT_LE(at_low, 200 + static_cast<std::size_t>(o.concurrency));  // one held start per handler
  log.held().open();
  ASSERT_TRUE(wait_until([&] { return log.size() >= at_low + 1000; }, 60s));
  rc.stop();
  const std::vector<char> started = log.starts();
  int n = 0, l = 0;
  for (std::size_t i = at_low; i < at_low + 1000; ++i) {
    n += started[i] == 'n';
    l += started[i] == 'l';
  }
  std::printf("1000 starts after low arrived: normal %d, low %d (weights 3:1)\n", n, l);
  EXPECT_GT(l, 150);  // its share is 250, less the prefetch of normal ones read before it came
  EXPECT_GT(n, 600);  // and normal keeps most of the throughput
}

TEST_F(PriorityTest, RetryCopyKeepsItsLevel) {
  auto p = producer();
  const std::string id = p.enqueue("flaky", "{}", {.max_retries = 2, .priority = Priority::high});
  Client probe(server.url());  // used on the handler thread only
  std::atomic<int> calls{0};
  std::atomic<std::int64_t> high_len{-1}, normal_len{-1};
  std::string copy_retry_count;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      if (++calls == 1) throw std::runtime_error("first attempt fails");
      // The retry copy is running: it is in the high stream until its ack.
      for (const auto& [entry_id, fields] : probe.xrange(high)) {
        if (Client::get(fields, "task_id") == id) copy_retry_count = Client::get(fields, "retry_count");
      }
      EXPECT_EQ(t.retry_count(), 1);
      high_len = probe.integer({"XLEN", high});
      normal_len = probe.integer({"XLEN", stream});
    });
  });
  ASSERT_TRUE(wait_until([&] { return calls == 2 && xlen(high) == 0; }));
  rc.stop();
  EXPECT_EQ(copy_retry_count, "1");
  EXPECT_EQ(high_len, 1);
  EXPECT_EQ(normal_len, 0);
  EXPECT_EQ(xlen(low), 0);
  EXPECT_EQ(rc.consumer().metrics().retried, 1u);
  EXPECT_EQ(rc.consumer().metrics().done, 1u);
}

TEST_F(PriorityTest, RetryAfterABackoffGoesBackToItsLevel) {
  // With a backoff the retry copy waits in the delayed set; the forwarder then adds it to the
  // stream the task came from, not to the normal one.
  auto p = producer();
  const std::string id = p.enqueue("flaky", "{}", {.max_retries = 2, .priority = Priority::low});
  Client probe(server.url());  // used on the handler thread only
  std::atomic<int> calls{0};
  std::string copy_retry_count;
  auto o = options();
  o.retry_backoff = {.base = std::chrono::milliseconds(50), .jitter = false};
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("flaky", [&](const Task&) {
      if (++calls == 1) throw std::runtime_error("first attempt fails");
      for (const auto& [entry_id, fields] : probe.xrange(low)) {
        if (Client::get(fields, "task_id") == id) copy_retry_count = Client::get(fields, "retry_count");
      }
    });
  });
  ASSERT_TRUE(wait_until([&] { return calls == 2 && xlen(low) == 0; }));
  rc.stop();
  EXPECT_EQ(copy_retry_count, "1");
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(xlen(high), 0);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0);
  EXPECT_EQ(rc.consumer().metrics().retried, 1u);
  EXPECT_EQ(rc.consumer().metrics().done, 1u);
}

TEST_F(PriorityTest, DeadLettersOfEveryLevelGoToTheQueuesDeadLetterStream) {
  auto p = producer();
  const std::string id_high = p.enqueue("doomed", "{}", {.max_retries = 0, .priority = Priority::high});
  const std::string id_low = p.enqueue("doomed", "{}", {.max_retries = 0, .priority = Priority::low});
  RunningConsumer rc(options(),
                     [&](Consumer& c) { c.on("doomed", [](const Task&) { throw PermanentError("no"); }); });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 2 && xlen(high) == 0 && xlen(low) == 0; }));
  rc.stop();
  EXPECT_EQ(client.integer({"EXISTS", high + ":dlq"}), 0);
  EXPECT_EQ(client.integer({"EXISTS", low + ":dlq"}), 0);
}

TEST_F(PriorityTest, ReclaimsAHighEntryOfADeadWorker) {
  auto p = producer();
  const std::string id = p.enqueue("work", R"({"level":"high"})", {.priority = Priority::high});
  // A worker read it from the high stream and died.
  client.cmd({"XGROUP", "CREATE", high, "workers", "0", "MKSTREAM"});
  const auto r = client.cmd({"XREADGROUP", "GROUP", "workers", "dead", "COUNT", "1", "STREAMS", high, ">"});
  ASSERT_EQ(r.view().check()[0][1].size(), 1u);
  std::atomic<int> runs{0};
  std::string seen;
  auto o = options();
  o.heartbeat_interval = 100ms;
  o.claim_min_idle = 300ms;
  o.reclaim_interval = 100ms;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      seen = t.id();
      ++runs;
    });
  });
  ASSERT_TRUE(wait_until([&] { return runs == 1 && xlen(high) == 0; }));
  rc.stop();
  EXPECT_EQ(seen, id);
  EXPECT_EQ(rc.consumer().metrics().reclaimed, 1u);
  EXPECT_EQ(client.cmd({"XPENDING", high, "workers"}).view().check()[0].integer(), 0);
}

TEST_F(PriorityTest, ReplaysItsOwnHighEntriesOnRestart) {
  auto p = producer();
  p.enqueue("work", R"({"level":"high"})", {.priority = Priority::high});
  client.cmd({"XGROUP", "CREATE", high, "workers", "0", "MKSTREAM"});
  client.cmd({"XREADGROUP", "GROUP", "workers", "slot-1", "COUNT", "1", "STREAMS", high, ">"});
  std::atomic<int> runs{0};
  auto o = options();
  o.consumer_name = "slot-1";
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++runs; }); });
  ASSERT_TRUE(wait_until([&] { return runs == 1 && xlen(high) == 0; }));
  rc.stop();
  EXPECT_EQ(rc.consumer().metrics().replayed, 1u);
}

// A restart with pending entries on two levels says once how many it replays, not once per
// level (an operator read "replaying 2 pending entries" twice and counted 2).
TEST_F(PriorityTest, ARestartLogsOnceHowManyOfItsOwnEntriesItReplays) {
  auto p = producer();
  for (int i = 0; i < 2; ++i) p.enqueue("work", "{}", {.priority = Priority::high});
  for (int i = 0; i < 2; ++i) p.enqueue("work", "{}");
  for (const std::string& level : {high, stream}) {
    client.cmd({"XGROUP", "CREATE", level, "workers", "0", "MKSTREAM"});
    client.cmd({"XREADGROUP", "GROUP", "workers", "slot-1", "COUNT", "2", "STREAMS", level, ">"});
  }
  LogCapture logs(LogLevel::info);
  std::atomic<int> runs{0};
  auto o = options();
  o.consumer_name = "slot-1";
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++runs; }); });
  ASSERT_TRUE(wait_until([&] { return runs == 4; }));
  rc.stop();
  EXPECT_EQ(rc.consumer().metrics().replayed, 4u);
  EXPECT_EQ(logs.count(LogLevel::info, "replaying"), 1u);
  EXPECT_EQ(logs.count(LogLevel::info, "replaying 4 pending entries of consumer slot-1"), 1u);
}

TEST_F(PriorityTest, StatsReportEveryLevel) {
  auto p = producer();
  for (int i = 0; i < 3; ++i) p.enqueue("work", "{}", {.priority = Priority::high});
  for (int i = 0; i < 2; ++i) p.enqueue("work", "{}");
  p.enqueue("work", "{}", {.priority = Priority::low});
  // A worker holds one high entry.
  client.cmd({"XGROUP", "CREATE", high, "workers", "0", "MKSTREAM"});
  client.cmd({"XGROUP", "CREATE", stream, "workers", "0", "MKSTREAM"});
  client.cmd({"XREADGROUP", "GROUP", "workers", "w", "COUNT", "1", "STREAMS", high, ">"});
  StatsReader reader({.connection = {.url = server.url()}, .stream = stream});
  const QueueStats st = reader.read();
  ASSERT_EQ(st.levels.size(), 3u);
  EXPECT_EQ(st.levels[0].level, "high");
  EXPECT_EQ(st.levels[0].stream, high);
  EXPECT_EQ(st.levels[0].length, 3);
  EXPECT_EQ(st.levels[0].pending, 1);
  EXPECT_EQ(st.levels[1].level, "normal");
  EXPECT_EQ(st.levels[1].length, 2);
  EXPECT_EQ(st.levels[1].pending, 0);
  EXPECT_EQ(st.levels[2].level, "low");
  EXPECT_EQ(st.levels[2].length, 1);
  EXPECT_FALSE(st.levels[2].lag.has_value());  // no group on the low stream yet
  // The numbers people alert on count the whole queue: the held high entry is pending, and
  // every level's entries are in the length (before, 2 and 0: the normal level's alone).
  EXPECT_EQ(st.length, 6);
  EXPECT_EQ(st.pending_total, 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  EXPECT_EQ(st.total_length, 6);  // deprecated aliases, until 0.3
  EXPECT_EQ(st.total_pending, 1);
#pragma GCC diagnostic pop
  if (client.redis_at_least(7, 0)) {
    ASSERT_TRUE(st.levels[0].lag.has_value());
    EXPECT_EQ(*st.levels[0].lag, 2);
  }
  const std::string prom = st.to_prometheus();
  EXPECT_NE(prom.find("streamq_level_length{stream=\"" + stream + "\",level=\"high\"} 3\n"),
            std::string::npos)
      << prom;
  EXPECT_NE(prom.find("streamq_level_pending{stream=\"" + stream + "\",level=\"high\"} 1\n"),
            std::string::npos);
  EXPECT_NE(prom.find("streamq_pending{stream=\"" + stream + "\"} 1\n"), std::string::npos) << prom;
  EXPECT_NE(prom.find("streamq_stream_length{stream=\"" + stream + "\"} 6\n"), std::string::npos) << prom;
  const auto doc = nlohmann::json::parse(st.to_json());
  EXPECT_EQ(doc["levels"][2]["level"], "low");
  EXPECT_EQ(doc["levels"][2]["length"], 1);
  EXPECT_EQ(doc["queue_length"], 6);
  EXPECT_EQ(doc["pending_total"], 1);
  EXPECT_EQ(doc["total_length"], 6);
  EXPECT_EQ(doc["total_pending"], 1);
}

}  // namespace
}  // namespace streamq::test
