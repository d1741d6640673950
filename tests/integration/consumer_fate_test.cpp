// SPDX-License-Identifier: MIT
// Where each task ends when its entry is deleted, stolen or retried under a worker: exactly
// one place (done, a retry copy, or one dead-letter entry), whatever the order of events.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "gate.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(ConsumerTest, EntryDeletedWhileQueuedIsDeadLetteredOnceAndNeverRun) {
  auto p = producer();
  p.enqueue("block", "{}");
  p.enqueue("work", R"({"n":1})");
  p.enqueue("work", R"({"n":2})");
  Gate gate;
  std::atomic<int> ran{0};
  auto o = options();
  o.concurrency = 1;
  o.prefetch = 4;
  o.heartbeat_interval = 1000ms;
  o.claim_min_idle = 3000ms;
  o.reclaim_interval = 50ms;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("block", [&](const Task& t) { gate.pass(t.entry_id()); });
    c.on("work", [&](const Task&) { ++ran; });
  });
  const auto release = gate.opens_on_exit();
  const std::string blocker = gate.arrived();
  ASSERT_FALSE(blocker.empty());
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 3u);
  // Delete both queued entries right after the holder's leases were set (delivery or renewal),
  // so its next lease pass is most of a second away while reclaimers pass every 50 ms: a
  // reclaimer that dead-letters deleted entries a live worker holds (as XAUTOCLAIM does on
  // Redis 7, idle or not) does so before the holder notices, and the holder then runs them.
  // Both must be queued in the worker first (read, so pending): one still unread when it is
  // deleted is never delivered at all, and the test would wait for a dead letter in vain.
  ASSERT_TRUE(wait_until([&] { return pending() == 3; }));
  ASSERT_TRUE(wait_until([&] { return pending_entry(blocker).idle_ms < 100; }));
  client.cmd({"XDEL", stream, entries[1].first, entries[2].first});
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 2; }));
  gate.open();
  ASSERT_TRUE(wait_until([&] { return pending() == 0 && xlen(stream) == 0; }));
  rc.stop();
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(xlen(dlq), 2);
  std::set<std::string> originals, payloads;
  for (const auto& [id, f] : client.xrange(dlq)) {
    EXPECT_EQ(Client::get(f, "reason"), "body_lost");
    EXPECT_EQ(Client::get(f, "task_type"), "work");  // the fields the holder had read
    originals.insert(Client::get(f, "original_id"));
    payloads.insert(Client::get(f, "payload"));
  }
  EXPECT_EQ(originals, (std::set<std::string>{entries[1].first, entries[2].first}));
  EXPECT_EQ(payloads, (std::set<std::string>{R"({"n":1})", R"({"n":2})"}));
  const ConsumerMetrics m = rc.consumer().metrics();
  EXPECT_EQ(m.skipped, 2u);
  EXPECT_EQ(m.dead_lettered, 2u);
  EXPECT_EQ(m.done, 1u);
}

enum class Ending { returns, throws, permanent };

class EntryDeletedWhileRunning : public ConsumerTest, public ::testing::WithParamInterface<Ending> {};

TEST_P(EntryDeletedWhileRunning, EndsInExactlyOnePlace) {
  const Ending ending = GetParam();
  const std::string task_id =
      producer().enqueue("long", R"({"k":"v"})", {.max_retries = 1, .extra_fields = {{"priority", "high"}}});
  Gate gate;
  std::atomic<int> first_runs{0}, retry_runs{0};
  auto o = options();
  o.heartbeat_interval = 200ms;
  o.claim_min_idle = 1000ms;
  o.reclaim_interval = 50ms;
  auto setup = [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      if (t.retry_count() > 0) {
        ++retry_runs;
        return;
      }
      ++first_runs;
      gate.pass(t.entry_id());
      if (ending == Ending::throws) throw std::runtime_error("failed after the body went");
      if (ending == Ending::permanent) throw PermanentError("refused after the body went");
    });
  };
  RunningConsumer a(o, setup);
  const auto release_a = gate.opens_on_exit();
  const std::string entry_id = gate.arrived();
  ASSERT_FALSE(entry_id.empty());
  RunningConsumer b(o, setup);  // a second worker, reclaiming every 50 ms
  const auto release_b = gate.opens_on_exit();
  client.cmd({"XDEL", stream, entry_id}).view().check();
  // The holder's next lease pass finds the body gone: it writes the fields it read to the
  // dead-letter stream and takes the entry off the pending list, so no reclaimer can
  // dead-letter it a second time.
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }));
  const auto provisional = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(provisional, "reason"), "body_lost");
  EXPECT_EQ(Client::get(provisional, "task_id"), task_id);
  EXPECT_EQ(Client::get(provisional, "priority"), "high");
  gate.open();
  switch (ending) {
    case Ending::returns:
      // Done: the provisional record is deleted.
      ASSERT_TRUE(wait_until([&] { return a.consumer().metrics().done == 1 && xlen(dlq) == 0; }));
      break;
    case Ending::throws:
      // Retried: the retry copy replaces the record and runs.
      ASSERT_TRUE(wait_until([&] { return retry_runs == 1 && xlen(stream) == 0 && pending() == 0; }));
      EXPECT_EQ(xlen(dlq), 0);
      break;
    case Ending::permanent: {
      // Dead-lettered for its own reason: the record is replaced, not added to.
      ASSERT_TRUE(wait_until([&] {
        const auto all = client.xrange(dlq);
        return all.size() == 1 && Client::get(all[0].second, "reason") == "permanent";
      }));
      const auto dead = client.xrange(dlq).at(0).second;
      EXPECT_EQ(Client::get(dead, "error"), "refused after the body went");
      EXPECT_EQ(Client::get(dead, "task_id"), task_id);
      break;
    }
  }
  EXPECT_EQ(first_runs, 1);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
}

INSTANTIATE_TEST_SUITE_P(Endings, EntryDeletedWhileRunning,
                         ::testing::Values(Ending::returns, Ending::throws, Ending::permanent),
                         [](const auto& info) {
                           switch (info.param) {
                             case Ending::returns: return std::string("HandlerReturns");
                             case Ending::throws: return std::string("HandlerThrows");
                             case Ending::permanent: return std::string("HandlerThrowsPermanentError");
                           }
                           return std::string("unknown");
                         });

class StaleWorker : public ConsumerTest, public ::testing::WithParamInterface<Ending> {};

TEST_P(StaleWorker, OnlyItsSuccessIsWrittenOnceAnotherConsumerOwnsTheEntry) {
  const Ending ending = GetParam();
  producer().enqueue("slow", "{}");
  Gate gate;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("slow", [&](const Task& t) {
      gate.pass(t.entry_id());
      if (ending == Ending::throws) throw std::runtime_error("failed after losing the lease");
      if (ending == Ending::permanent) throw PermanentError("refused after losing the lease");
    });
  });
  const auto release = gate.opens_on_exit();
  const std::string entry_id = gate.arrived();
  ASSERT_FALSE(entry_id.empty());
  client.cmd({"XCLAIM", stream, "workers", "thief", "0", entry_id}).view().check();
  gate.open();
  if (ending == Ending::returns) {
    // A success is final even after the lease was lost: the task is done, and the thief's
    // completion of it will find nothing to do.
    ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1; }));
    EXPECT_EQ(xlen(stream), 0);
    EXPECT_EQ(pending(), 0);
    EXPECT_EQ(rc.consumer().metrics().stale, 0u);
  } else {
    ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().stale == 1; }));
    EXPECT_EQ(xlen(stream), 1);                         // the original only: no retry copy
    EXPECT_EQ(xlen(dlq), 0);                            // and no dead letter
    EXPECT_EQ(pending_entry(entry_id).owner, "thief");  // the thief's claim is intact
    EXPECT_EQ(rc.consumer().metrics().retried + rc.consumer().metrics().dead_lettered, 0u);
  }
  rc.stop();
}

INSTANTIATE_TEST_SUITE_P(Endings, StaleWorker,
                         ::testing::Values(Ending::returns, Ending::throws, Ending::permanent),
                         [](const auto& info) {
                           switch (info.param) {
                             case Ending::returns: return std::string("Success");
                             case Ending::throws: return std::string("Retry");
                             case Ending::permanent: return std::string("DeadLetter");
                           }
                           return std::string("unknown");
                         });

TEST_F(ConsumerTest, ExtraFieldsRideIntoRetryCopiesAndDeadLetters) {
  const std::string id = producer().enqueue(
      "flaky", R"({"x":1})", {.max_retries = 1, .extra_fields = {{"priority", "high"}, {"tenant", "acme"}}});
  std::mutex m;
  std::vector<std::pair<std::string, std::string>> seen;  // priority, tenant per attempt
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      {
        std::lock_guard lock(m);
        seen.emplace_back(std::string(t.field("priority").value_or("")),
                          std::string(t.field("tenant").value_or("")));
      }
      throw std::runtime_error("attempt " + std::to_string(t.retry_count()));
    });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0 && xlen(stream) == 0; }));
  rc.stop();
  ASSERT_EQ(seen.size(), 2u);  // first attempt and the retry copy
  for (const auto& [priority, tenant] : seen) {
    EXPECT_EQ(priority, "high");
    EXPECT_EQ(tenant, "acme");
  }
  const auto dead = client.xrange(dlq).at(0).second;
  EXPECT_EQ(Client::get(dead, "task_id"), id);
  EXPECT_EQ(Client::get(dead, "priority"), "high");
  EXPECT_EQ(Client::get(dead, "tenant"), "acme");
  EXPECT_EQ(Client::get(dead, "last_error"), "attempt 0");
  EXPECT_EQ(Client::get(dead, "error"), "attempt 1");
}

TEST_F(ConsumerTest, ReclaimedEntriesRunOneAtATimeBesideFreshWork) {
  auto p = producer();
  for (int i = 0; i < 6; ++i) p.enqueue("work", "{}");
  ASSERT_EQ(read_as("dead-worker", 6).size(), 6u);  // its worker died holding them
  for (int i = 0; i < 12; ++i) p.enqueue("work", "{}");
  std::atomic<int> suspects_now{0}, suspects_max{0}, running_now{0}, running_max{0}, done{0};
  auto raise = [](std::atomic<int>& now, std::atomic<int>& max) {
    const int n = ++now;
    for (int m = max.load(); n > m && !max.compare_exchange_weak(m, n);) {
    }
  };
  auto o = options();
  o.concurrency = 4;
  o.claim_min_idle = 300ms;
  o.heartbeat_interval = 100ms;
  o.reclaim_interval = 50ms;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      const bool suspect = t.deliveries() > 1;
      if (suspect) raise(suspects_now, suspects_max);
      raise(running_now, running_max);
      std::this_thread::sleep_for(100ms);  // the task's own work
      --running_now;
      if (suspect) --suspects_now;
      ++done;
    });
  });
  ASSERT_TRUE(wait_until([&] { return done == 18 && pending() == 0; }, 30s));
  rc.stop();
  EXPECT_EQ(suspects_max, 1);  // reclaimed ones one at a time ...
  EXPECT_GE(running_max, 2);   // ... while fresh work runs beside them
  EXPECT_EQ(rc.consumer().metrics().reclaimed, 6u);
}

}  // namespace
}  // namespace streamq::test
