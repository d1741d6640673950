// SPDX-License-Identifier: MIT
// ProducerOptions::min_replicas_acked: a master with one replica, both private servers.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class ReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Ready when the replica acknowledges a write (its link being up on its side comes earlier,
    // and a WAIT after no write counts a replica that is still syncing).
    ASSERT_TRUE(wait_until(
        [&] {
          master_client.cmd({"SET", stream + ":ready", "1"}).view().check();
          return master_client.integer({"WAIT", "1", "100"}) == 1;
        },
        10s))
        << "the replica did not connect to its master";
    waits_before = waits_sent();
  }

  /// `timeout`: short where the test expects WAIT to time out, long where it expects the
  /// acknowledgement (WAIT returns as soon as it has it; a loaded machine may take a while).
  ProducerOptions options(int replicas, std::chrono::milliseconds timeout = 300ms) const {
    return {.connection = {.url = master.url(), .socket_timeout = timeout + 2s},
            .stream = stream,
            .min_replicas_acked = replicas,
            .replicas_ack_timeout = timeout};
  }
  /// WAITs the master has run, the set-up's own included (see waits_before).
  std::int64_t waits_sent() {
    const std::string stats(master_client.cmd({"INFO", "commandstats"}).view().str());
    const auto at = stats.find("cmdstat_wait:calls=");
    return at == std::string::npos ? 0 : std::stoll(stats.substr(at + 19));
  }

  // No wait before the full sync a replica asks for (Redis waits 5 s for more replicas by default).
  RedisServer master{{.extra = {"--repl-diskless-sync-delay", "0"}}};
  RedisServer replica{{.extra = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}};
  Client master_client{master.url()};
  Client replica_client{replica.url()};
  std::string stream = unique_key();
  std::int64_t waits_before = 0;
};

TEST_F(ReplicationTest, EnqueueReturnsOnceTheReplicaHasTheTask) {
  Producer producer(options(1, 5s));
  producer.enqueue("t", "{}", {.task_id = "one"});
  // WAIT returned: the replica has the entry now, not eventually.
  EXPECT_EQ(replica_client.integer({"XLEN", stream}), 1);
  const std::vector<std::string> ids =
      producer.enqueue_batch(std::vector<TaskSpec>(200, TaskSpec{"t", "{}"}));
  EXPECT_EQ(replica_client.integer({"XLEN", stream}), 201);
  EXPECT_EQ(waits_sent() - waits_before, 2) << "one WAIT per enqueue call, batch or not";

  // The seed's path (Overflow::trim_oldest: plain XADDs, pipelined for a batch) waits too.
  auto trim = options(1, 5s);
  trim.overflow = Overflow::trim_oldest;
  Producer trimming(trim);
  trimming.enqueue("t", "{}");
  trimming.enqueue_batch(std::vector<TaskSpec>(50, TaskSpec{"t", "{}"}));
  EXPECT_EQ(replica_client.integer({"XLEN", stream}), 252);
  EXPECT_EQ(waits_sent() - waits_before, 4);

  // Without the option, no WAIT.
  Producer plain({.connection = {.url = master.url()}, .stream = stream});
  plain.enqueue("t", "{}");
  EXPECT_EQ(waits_sent() - waits_before, 4);
}

TEST_F(ReplicationTest, ARefusedWriteIsNotWaitedForAndAPartlyWrittenBatchIs) {
  auto small = options(1, 5s);
  small.max_len = 70;
  Producer producer(small);
  producer.enqueue_batch(std::vector<TaskSpec>(70, TaskSpec{"t", "{}"}));
  const std::int64_t after_fill = waits_sent();
  EXPECT_THROW(producer.enqueue("t", "{}"), QueueFullError);
  EXPECT_EQ(waits_sent(), after_fill) << "nothing written, nothing to wait for";

  // A batch whose first chunk (64 tasks) fits and whose second does not: the written part is
  // waited for, and the refusal says what the replicas acknowledged of it.
  master_client.cmd({"DEL", stream}).view().check();
  try {
    producer.enqueue_batch(std::vector<TaskSpec>(100, TaskSpec{"t", "{}"}));
    FAIL() << "no QueueFullError";
  } catch (const QueueFullError& e) {
    EXPECT_EQ(e.accepted(), 64u);
    EXPECT_NE(std::string(e.what()).find("the tasks written were acknowledged by 1 of the 1 replicas"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(waits_sent(), after_fill + 1);
  EXPECT_EQ(replica_client.integer({"XLEN", stream}), 64);
}

TEST_F(ReplicationTest, TooFewAcknowledgementsThrowReplicationErrorWithTheTaskIds) {
  // Two replicas asked for, one there: the task is written, the error says so (WAIT takes its
  // whole timeout, long enough for the one replica to have acknowledged on a loaded machine).
  Producer two(options(2, 2s));
  const auto start = std::chrono::steady_clock::now();
  try {
    two.enqueue("t", "{}", {.task_id = "needs-two"});
    FAIL() << "no ReplicationError";
  } catch (const ReplicationError& e) {
    EXPECT_EQ(e.task_ids(), std::vector<std::string>{"needs-two"});
    EXPECT_EQ(e.acknowledged(), 1);
    EXPECT_EQ(e.required(), 2);
    EXPECT_NE(std::string(e.what()).find("lost only if the master fails before a replica copies them"),
              std::string::npos)
        << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 2s) << "WAIT waits for its timeout";
  EXPECT_EQ(master_client.integer({"XLEN", stream}), 1) << "the task is queued on the master";

  // The one replica stalled: none acknowledges a batch, and every id of it is reported.
  Producer one(options(1));
  replica.pause();
  std::vector<std::string> reported;
  try {
    one.enqueue_batch(std::vector<TaskSpec>(100, TaskSpec{"t", "{}"}));
  } catch (const ReplicationError& e) {
    reported = e.task_ids();
    EXPECT_EQ(e.acknowledged(), 0);
  }
  replica.resume();
  ASSERT_EQ(reported.size(), 100u);
  for (const std::string& id : reported) EXPECT_FALSE(id.empty());
  EXPECT_EQ(master_client.integer({"XLEN", stream}), 101);
  EXPECT_TRUE(wait_until(
      [&] {
        return replica_client.integer({"XLEN", stream}) == 101;
      },
      10s))
      << "the replica catches up once it runs again";
}

TEST_F(ReplicationTest, AsynchronousEnqueuesAnsweredTogetherShareOneWait) {
  // Each asynchronous enqueue waits for the replicas after its own write was answered; those
  // answered while a WAIT is still queued join it (it follows their writes), instead of a WAIT
  // each, sent one after another (one per task on 1ffe165: 1,000 here).
  Producer producer(options(1, 5s));
  std::vector<std::future<std::string>> written;
  for (int i = 0; i < 1000; ++i) written.push_back(producer.enqueue_async("t", "{}"));
  for (auto& f : written) EXPECT_FALSE(f.get().empty());
  EXPECT_EQ(replica_client.integer({"XLEN", stream}), 1000) << "each answer came after its WAIT";
  const std::int64_t shared = waits_sent() - waits_before;
  std::printf("1000 asynchronous enqueues: %lld WAITs\n", static_cast<long long>(shared));
  EXPECT_GE(shared, 1);
  EXPECT_LE(shared, 250);

  // Too few replicas: each caller still gets its own error, naming its own task. Each WAIT takes
  // its whole timeout, so the calls answered meanwhile all join the next one. (The errors are
  // looked at in the completions: an exception object read on another thread after its future
  // handed it over is freed by whichever thread drops it last, through libstdc++'s reference
  // count, which ThreadSanitizer does not see.)
  std::mutex m;  // (before the Producer, whose destructor may still answer into them)
  std::vector<std::string> named(100);
  std::atomic<int> answered{0};
  Producer two(options(2, 300ms));
  const std::int64_t before = waits_sent();
  for (std::size_t i = 0; i < 100; ++i) {
    two.enqueue_async("t", "{}", {.task_id = "needs-two-" + std::to_string(i)},
                      [&, i](std::exception_ptr error, const std::string&) {
                        std::string says = "no ReplicationError";
                        try {
                          if (error) std::rethrow_exception(error);
                        } catch (const ReplicationError& e) {
                          says = e.acknowledged() == 1 && e.task_ids().size() == 1 ? e.task_ids()[0]
                                                                                   : "another count";
                        } catch (...) {
                          says = "another error";
                        }
                        std::lock_guard lock(m);
                        named[i] = says;
                        answered.fetch_add(1);
                      });
  }
  ASSERT_TRUE(wait_until([&] { return answered.load() == 100; }, 20s)) << answered.load();
  {
    std::lock_guard lock(m);
    for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(named[i], "needs-two-" + std::to_string(i));
  }
  EXPECT_LE(waits_sent() - before, 10) << "a WAIT of 300 ms each would take 30 s";
  EXPECT_EQ(master_client.integer({"XLEN", stream}), 1100);
}

TEST(ReplicationOptions, AreChecked) {
  const auto with = [](int replicas, std::chrono::milliseconds timeout) {
    return ProducerOptions{.min_replicas_acked = replicas, .replicas_ack_timeout = timeout};
  };
  EXPECT_THROW(Producer{with(-1, 300ms)}, ConfigError);
  EXPECT_THROW(Producer{with(1, 0ms)}, ConfigError);
  // The default socket timeout, 5 s, would cut such a WAIT off.
  EXPECT_THROW(Producer{with(1, 5s)}, ConfigError);
  EXPECT_NO_THROW(Producer{with(1, 3s)});   // connects lazily: no server needed
  EXPECT_NO_THROW(Producer{with(0, 0ms)});  // no WAIT, so no timeout to check
}

}  // namespace
}  // namespace streamq::test
