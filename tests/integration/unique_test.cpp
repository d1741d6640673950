// SPDX-License-Identifier: MIT
// Unique tasks (EnqueueOptions::unique_for): one task per unique key while it is unfinished,
// the lock `<stream>:unique:<key>` released when the task succeeds or is dead-lettered (only
// while it still holds that task), and gone by itself after the window.
#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class UniqueTest : public ConsumerTest {
 protected:
  std::string lock(const std::string& key) const { return stream + ":unique:" + key; }
  /// The task id the lock holds, or nullopt when there is no lock.
  std::optional<std::string> holder(const std::string& key) {
    const detail::Reply r = client.cmd({"GET", lock(key)});
    if (r.view().check().is_nil()) return std::nullopt;
    return std::string(r.view().str());
  }
  std::int64_t pttl(const std::string& key) { return client.integer({"PTTL", lock(key)}); }
  /// How many entries of `key` (a stream) have this unique_key field.
  std::size_t with_unique_key(const std::string& key, const std::string& unique) {
    std::size_t n = 0;
    for (const auto& [id, fields] : client.xrange(key))
      n += Client::get(fields, "unique_key") == unique ? 1 : 0;
    return n;
  }
  static EnqueueOptions unique(std::string key, std::chrono::milliseconds window = 60s) {
    return EnqueueOptions{.unique_for = window, .unique_key = std::move(key)};
  }
};

TEST_F(UniqueTest, ConcurrentDuplicateEnqueuesGiveExactlyOneTask) {
  constexpr int kThreads = 16;
  std::vector<Producer> producers;
  producers.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    producers.push_back(producer());
    // Connected before the race, so the enqueues below meet at the server, not in connect().
    producers.back().enqueue("warm_up", "{}", unique("warm-" + std::to_string(i)));
  }
  std::latch start(kThreads);
  std::mutex m;
  std::vector<std::string> winners;
  std::vector<std::string> holders;  // existing_task_id() of each refusal
  std::vector<std::string> other_errors;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      try {
        const std::string id =
            producers[static_cast<std::size_t>(i)].enqueue("work", "{}", unique("report-42"));
        std::lock_guard lock(m);
        winners.push_back(id);
      } catch (const DuplicateTaskError& e) {
        std::lock_guard lock(m);
        holders.push_back(e.existing_task_id());
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        other_errors.emplace_back(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(other_errors.empty()) << other_errors.front();
  ASSERT_EQ(winners.size(), 1u);
  EXPECT_EQ(holders.size(), static_cast<std::size_t>(kThreads - 1));
  for (const std::string& h : holders) EXPECT_EQ(h, winners[0]);
  EXPECT_EQ(with_unique_key(stream, "report-42"), 1u);
  EXPECT_EQ(xlen(stream), kThreads + 1);  // the warm-up tasks and the one winner
  EXPECT_EQ(holder("report-42"), winners[0]);
}

TEST_F(UniqueTest, TheTaskIdIsTheDefaultUniqueKey) {
  auto p = producer();
  const EnqueueOptions o{.task_id = "order-7-confirmation", .unique_for = 60s};
  EXPECT_EQ(p.enqueue("send_email", "{}", o), "order-7-confirmation");
  try {
    p.enqueue("send_email", "{}", o);
    ADD_FAILURE() << "a second enqueue with the same task id was accepted";
  } catch (const DuplicateTaskError& e) {
    EXPECT_EQ(e.existing_task_id(), "order-7-confirmation");
    EXPECT_EQ(e.index(), 0u);
    EXPECT_NE(std::string(e.what()).find(lock("order-7-confirmation")), std::string::npos) << e.what();
  }
  EXPECT_EQ(xlen(stream), 1);
  EXPECT_EQ(holder("order-7-confirmation"), "order-7-confirmation");
  // Without unique_for a task id is not checked: the same id is a second task.
  EXPECT_EQ(p.enqueue("send_email", "{}", {.task_id = "order-7-confirmation"}), "order-7-confirmation");
  EXPECT_EQ(xlen(stream), 2);
}

TEST_F(UniqueTest, TheLockIsReleasedWhenTheTaskSucceeds) {
  auto p = producer();
  // Unique and plain tasks mixed, so their successes share acknowledgement batches.
  std::vector<std::string> ids;
  for (int i = 0; i < 20; ++i) {
    ids.push_back(p.enqueue("work", "{}", unique("k" + std::to_string(i))));
    p.enqueue("work", "{}");
  }
  EXPECT_THROW(p.enqueue("work", "{}", unique("k0")), DuplicateTaskError);
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 40; }));
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(holder("k" + std::to_string(i)), std::nullopt) << "lock k" << i << " was not released";
  }
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(ran.load(), 40);
  // The same key enqueues again, and runs.
  const std::string again = p.enqueue("work", "{}", unique("k0"));
  EXPECT_NE(again, ids[0]);
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 41 && !holder("k0"); }));
}

TEST_F(UniqueTest, TheLockIsReleasedWhenTheTaskIsDeadLettered) {
  auto p = producer();
  const std::string permanent = p.enqueue("charge", R"({"card":"declined"})", unique("charge-1"));
  const std::string no_handler = p.enqueue("nobody_runs_this", "{}", unique("orphan-type"));
  EnqueueOptions exhausted = unique("flaky-1");
  exhausted.max_retries = 1;
  const std::string flaky = p.enqueue("flaky", "{}", exhausted);
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("charge", [](const Task&) { throw PermanentError("card declined"); });
    c.on("flaky", [](const Task&) { throw std::runtime_error("upstream down"); });
  });
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().dead_lettered == 3; }));
  EXPECT_EQ(holder("charge-1"), std::nullopt);     // permanent
  EXPECT_EQ(holder("orphan-type"), std::nullopt);  // no_handler
  EXPECT_EQ(holder("flaky-1"), std::nullopt);      // retries_exhausted, after one retry
  EXPECT_EQ(xlen(dlq), 3);
  EXPECT_EQ(with_unique_key(dlq, "charge-1"), 1u);  // the dead letter keeps the field
  EXPECT_NO_THROW(p.enqueue("charge", R"({"card":"new"})", unique("charge-1")));
}

TEST_F(UniqueTest, TheLockIsReleasedWhenTheReclaimerDeadLettersAPoisonTask) {
  auto p = producer();
  const std::string id = p.enqueue("crashes_its_worker", "{}", unique("poison"));
  const auto entries = read_as("dead-worker", 1);
  ASSERT_EQ(entries.size(), 1u);
  // Started max_deliveries times by workers that died running it.
  client.cmd({"XCLAIM", stream, "workers", "dead-worker", "0", entries[0], "RETRYCOUNT", "5", "JUSTID"})
      .view()
      .check();
  auto o = options();
  o.heartbeat_interval = 100ms;
  o.claim_min_idle = 300ms;
  o.reclaim_interval = 50ms;
  o.max_deliveries = 5;
  std::atomic<int> ran{0};
  RunningConsumer rc(o, [&](Consumer& c) { c.on("crashes_its_worker", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }));
  EXPECT_EQ(holder("poison"), std::nullopt);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(Client::get(client.xrange(dlq)[0].second, "reason"), "max_deliveries");
  EXPECT_NE(p.enqueue("crashes_its_worker", "{}", unique("poison")), id);
}

TEST_F(UniqueTest, TheLockHoldsThroughRetries) {
  auto p = producer();
  const std::string id = p.enqueue("flaky", "{}", unique("sync-user-9"));
  std::mutex m;
  std::vector<std::optional<std::string>> seen;  // the lock's holder at each attempt
  std::vector<std::string> refused_by;           // existing_task_id() of a duplicate tried meanwhile
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      Client own(server.url());  // the handler's own client: Client is not shared across threads
      const detail::Reply r = own.cmd({"GET", lock("sync-user-9")});
      std::optional<std::string> h;
      if (r.view().is_string()) h = std::string(r.view().str());
      std::string by;
      try {
        producer().enqueue("flaky", "{}", unique("sync-user-9"));
      } catch (const DuplicateTaskError& e) {
        by = e.existing_task_id();
      }
      {
        std::lock_guard lock(m);
        seen.push_back(h);
        refused_by.push_back(by);
      }
      if (t.retry_count() < 2) throw std::runtime_error("try again");
    });
  });
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1; }));
  EXPECT_EQ(rc.consumer().metrics().retried, 2u);
  {
    std::lock_guard lock(m);
    ASSERT_EQ(seen.size(), 3u);
    for (std::size_t i = 0; i < seen.size(); ++i) {
      EXPECT_EQ(seen[i], id) << "attempt " << i;
      EXPECT_EQ(refused_by[i], id) << "attempt " << i;
    }
  }
  ASSERT_TRUE(wait_until([&] { return !holder("sync-user-9"); }));
  EXPECT_EQ(xlen(stream), 0);
}

TEST_F(UniqueTest, TheLockExpiresAfterItsWindow) {
  auto p = producer();
  // A window of 2 s: the checks below come before it ends even on a loaded machine.
  const std::string first = p.enqueue("work", "{}", unique("nightly", 2s));
  const std::int64_t ttl = pttl("nightly");
  EXPECT_GT(ttl, 0);
  EXPECT_LE(ttl, 2000);
  EXPECT_EQ(holder("nightly"), first);
  EXPECT_THROW(p.enqueue("work", "{}", unique("nightly", 2s)), DuplicateTaskError);
  // Nobody runs the task: the lock goes by itself.
  ASSERT_TRUE(wait_until([&] { return pttl("nightly") == -2; }));
  const std::string second = p.enqueue("work", "{}", unique("nightly", 2s));
  EXPECT_NE(second, first);
  EXPECT_EQ(holder("nightly"), second);
  EXPECT_EQ(xlen(stream), 2);
}

TEST_F(UniqueTest, AFinishingTaskLeavesALockANewerTaskTookAlone) {
  auto p = producer();
  // Two old tasks whose short windows run out before they are run; newer tasks with the same
  // keys (delayed for an hour, so they hold their locks throughout) take the locks meanwhile.
  const std::string old_ok = p.enqueue("work", "{}", unique("a", 100ms));
  const std::string old_dead = p.enqueue("reject", "{}", unique("b", 100ms));
  ASSERT_TRUE(wait_until([&] { return pttl("a") == -2 && pttl("b") == -2; }));
  EnqueueOptions later_a = unique("a", 1h);
  later_a.delay = 1h;
  EnqueueOptions later_b = unique("b", 1h);
  later_b.delay = 1h;
  const std::string new_a = p.enqueue("work", "{}", later_a);
  const std::string new_b = p.enqueue("reject", "{}", later_b);
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("work", [](const Task&) {});
    c.on("reject", [](const Task&) { throw PermanentError("no"); });
  });
  ASSERT_TRUE(wait_until([&] {
    const ConsumerMetrics m = rc.consumer().metrics();
    return m.done == 1 && m.dead_lettered == 1;
  }));
  EXPECT_EQ(holder("a"), new_a);  // the old task's success did not delete it
  EXPECT_EQ(holder("b"), new_b);  // nor did the old task's dead letter
  EXPECT_THROW(p.enqueue("work", "{}", unique("a")), DuplicateTaskError);
}

TEST_F(UniqueTest, ABatchWithADuplicateInsideItWritesNothingOfThatChunk) {
  auto p = producer();
  std::vector<TaskSpec> batch;
  for (int i = 0; i < 5; ++i)
    batch.push_back({.task_type = "work", .payload = "{}", .options = unique("k" + std::to_string(i))});
  batch[1].options.task_id = "t1";
  batch[3].options.unique_key = "k1";
  try {
    p.enqueue_batch(batch);
    ADD_FAILURE() << "a batch naming one unique key twice was accepted";
  } catch (const DuplicateTaskError& e) {
    EXPECT_EQ(e.index(), 3u);
    EXPECT_EQ(e.accepted(), 0u);
    ASSERT_EQ(e.batch_ids().size(), 5u);
    for (const std::string& id : e.batch_ids()) EXPECT_EQ(id, "");
    EXPECT_EQ(e.existing_task_id(), "t1");  // the batch's own task 1, refused with it
    EXPECT_EQ(std::string(e.what()).rfind("duplicate task: wrote 0 of 5 tasks; refused 5 (indices 0-4)", 0),
              0u)
        << e.what();
  }
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(holder("k1"), std::nullopt);
  EXPECT_EQ(holder("k0"), std::nullopt);
}

TEST_F(UniqueTest, ABatchRefusedForADuplicateWritesAPrefix) {
  auto p = producer();
  const std::string holder_id = p.enqueue("work", "{}", unique("taken"));
  std::vector<TaskSpec> batch;
  for (int i = 0; i < 100; ++i) batch.push_back({.task_type = "work", .payload = "{}"});
  batch[80].options = unique("taken");
  batch[10].options = unique("free");
  try {
    p.enqueue_batch(batch);
    ADD_FAILURE() << "a batch with a taken unique key was accepted";
  } catch (const DuplicateTaskError& e) {
    EXPECT_EQ(e.index(), 80u);
    EXPECT_EQ(e.existing_task_id(), holder_id);
    EXPECT_EQ(e.accepted(), 64u);
    ASSERT_EQ(e.batch_ids().size(), 100u);
    for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(e.batch_ids()[i].empty(), i >= 64) << i;
    const std::string what = e.what();
    EXPECT_EQ(
        what.rfind("duplicate task: wrote 64 of 100 tasks (indices 0-63); refused 36 (indices 64-99) and "
                   "wrote nothing after the first refused one: duplicate task: unique lock " +
                       lock("taken") + " is held by task " + holder_id,
                   0),
        0u)
        << what;
    EXPECT_EQ(holder("free"), e.batch_ids()[10]);  // the written prefix took its lock
  }
  EXPECT_EQ(xlen(stream), 1 + 64);
  EXPECT_EQ(holder("taken"), holder_id);
}

TEST_F(UniqueTest, ALockKeyOfAnotherTypeRefusesTheBatchFromItsChunkOn) {
  // Not a duplicate, but not a lock either: the chunk that names it writes nothing, and nor
  // does any chunk after it, so what the batch wrote is still a prefix.
  client.cmd({"RPUSH", lock("odd"), "x"}).view().check();
  Producer p = producer();
  std::vector<TaskSpec> batch(100, TaskSpec{.task_type = "t", .payload = "{}"});
  batch[70].options = {.unique_for = std::chrono::minutes(1), .unique_key = "odd"};
  try {
    p.enqueue_batch(batch);
    FAIL() << "expected a ReplyError";
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.prefix(), "WRONGTYPE") << e.what();
  }
  EXPECT_EQ(xlen(stream), 64);  // the first chunk only
  EXPECT_THROW(p.enqueue("t", "{}", {.unique_for = std::chrono::minutes(1), .unique_key = "odd"}),
               ReplyError);
  EXPECT_EQ(xlen(stream), 64);
}

TEST_F(UniqueTest, UniqueOptionsAreChecked) {
  auto p = producer();
  EXPECT_THROW(p.enqueue("work", "{}", {.unique_key = "k"}), ConfigError);  // no unique_for
  EXPECT_THROW(p.enqueue("work", "{}", {.unique_for = -1ms}), ConfigError);
  EXPECT_THROW(p.enqueue("work", "{}", {.unique_for = -1ms, .unique_key = "k"}), ConfigError);
  EXPECT_THROW(p.enqueue_batch({{.task_type = "work", .payload = "{}"},
                                {.task_type = "work", .payload = "{}", .options = {.unique_key = "k"}}}),
               ConfigError);
  EXPECT_EQ(client.integer({"EXISTS", stream}), 0);  // nothing was sent
  EXPECT_EQ(holder("k"), std::nullopt);
}

}  // namespace
}  // namespace streamq::test
