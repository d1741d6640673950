// SPDX-License-Identifier: MIT
// Entries a worker held when it died: another worker reclaims them after claim_min_idle
// (one at a time, beside fresh work), a restart under the same name replays its own at once, and
// those whose body was trimmed or that were delivered max_deliveries times are dead-lettered
// instead of run. A live worker's lease keeps a long task from being reclaimed; a worker whose
// entry another consumer took writes only a success; idle consumers without pending entries
// leave the group.
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "control_fixture.hpp"
#include "gate.hpp"
#include "handler_ending.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

std::set<std::string> consumer_names(Client& c, const std::string& stream) {
  std::set<std::string> names;
  const detail::Reply r = c.cmd({"XINFO", "CONSUMERS", stream, "workers"});
  const auto v = r.view().check();
  for (std::size_t i = 0; i < v.size(); ++i) names.emplace(v[i].field("name").str());
  return names;
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

struct ReclaimedRun {
  int suspects_max = 0;
  int running_max = 0;
};

class ReclaimTest : public ConsumerTest {
 protected:
  /// Six entries of a dead worker, reclaimed, among twelve fresh ones: the most reclaimed ones
  /// and the most tasks that ran at once.
  ReclaimedRun run_reclaimed_beside_fresh(ConsumerOptions o) {
    Producer p = producer();
    for (int i = 0; i < 6; ++i) p.enqueue("work", "{}");
    EXPECT_EQ(read_as("dead-worker", 6).size(), 6u);  // its worker died holding them
    for (int i = 0; i < 12; ++i) p.enqueue("work", "{}");
    std::atomic<int> suspects_now{0}, suspects_max{0}, running_now{0}, running_max{0}, done{0};
    auto raise = [](std::atomic<int>& now, std::atomic<int>& max) {
      const int n = ++now;
      for (int m = max.load(); n > m && !max.compare_exchange_weak(m, n);) {
      }
    };
    o.concurrency = 4;
    o.claim_min_idle = 300ms;
    o.heartbeat_interval = 100ms;
    o.reclaim_interval = 50ms;
    RunningConsumer rc(o, [&](Consumer& c) {
      c.on("work", [&](const Task& task) {
        const bool suspect = task.deliveries() > 1;
        if (suspect) raise(suspects_now, suspects_max);
        raise(running_now, running_max);
        std::this_thread::sleep_for(100ms);  // the task's own work
        --running_now;
        if (suspect) --suspects_now;
        ++done;
      });
    });
    EXPECT_TRUE(wait_until([&] { return done == 18 && pending() == 0; }, 30s));
    rc.stop();
    EXPECT_EQ(rc.consumer().metrics().reclaimed, 6u);
    return {suspects_max.load(), running_max.load()};
  }
};

TEST_F(ReclaimTest, ReclaimedEntriesRunSideBySideWithFreshWork) {
  const ReclaimedRun r = run_reclaimed_beside_fresh(options());
  EXPECT_GE(r.suspects_max, 2);  // reclaimed ones beside each other ...
  EXPECT_GE(r.running_max, 2);
}

TEST_F(ReclaimTest, ReclaimedEntriesOnTheirLastStartRunOneAtATimeBesideFreshWork) {
  ConsumerOptions o = options();
  o.max_deliveries = 2;  // delivered once to the dead worker: the next start is the last
  const ReclaimedRun r = run_reclaimed_beside_fresh(o);
  EXPECT_EQ(r.suspects_max, 1);  // ... but one on its last start alone among them ...
  EXPECT_GE(r.running_max, 2);   // ... while fresh work runs beside it
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
  // Renewed every 150 ms, taken after 1.5 s without: a holder's duty thread may be late by a
  // second on a loaded machine (four consumers in one process, sanitizers) and keep its task.
  o.claim_min_idle = 1500ms;
  o.heartbeat_interval = 150ms;
  o.reclaim_interval = 50ms;
  std::atomic<bool> started{false};
  auto setup = [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      ++runs;
      started = true;
      EXPECT_EQ(t.deliveries(), 1);
      std::this_thread::sleep_for(4000ms);  // the long task itself: over twice claim_min_idle
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

// A running handler whose entry another consumer took (an XCLAIM, as a reclaimer does once the
// holder went silent for claim_min_idle) is stopped at its holder's next lease renewal
// (stop_reason() "lease_lost") rather than running on beside the new owner; what it throws
// then writes nothing: the entry and its fate are the new owner's. (On 377e4b4 the handler ran
// on until its own end.)
TEST_F(ControlTest, AHandlerWhoseEntryAnotherConsumerTookIsStopped) {
  producer().enqueue("slow", "{}", {.max_retries = 0});
  std::mutex m;
  std::string entry_id, why;
  std::atomic<bool> ended{false};
  RunningConsumer rc(fast(), [&](Consumer& c) {
    c.on("slow", [&](const Task& t) {
      {
        std::lock_guard lock(m);
        entry_id = t.entry_id();
      }
      const std::string reason = wait_for_stop(t, 20s);
      {
        std::lock_guard lock(m);
        why = reason;
      }
      ended = true;
      throw std::runtime_error("stopped");
    });
  });
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return !entry_id.empty();
  }));
  const std::string id = [&] {
    std::lock_guard lock(m);
    return entry_id;
  }();
  client.cmd({"XCLAIM", stream, "workers", "thief", "0", id}).view().check();
  ASSERT_TRUE(wait_until([&] { return ended.load(); }, 5s)) << "the handler ran on beside the new owner";
  {
    std::lock_guard lock(m);
    EXPECT_EQ(why, "lease_lost");
  }
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().stale == 1; }));
  EXPECT_EQ(xlen(stream), 1);  // the original only: no put-back copy
  EXPECT_EQ(xlen(dlq), 0);
  EXPECT_EQ(pending_entry(id).owner, "thief");
  EXPECT_EQ(rc.consumer().metrics().retried + rc.consumer().metrics().dead_lettered, 0u);
  rc.stop();
}

// The fence counts from the last renewal of an entry this worker still holds, and an entry
// whose body was deleted under its running handler is still held (its provisional dead-letter
// record waits for the handler's outcome): a handler running for several leases after the XDEL
// is not fenced, and its success is the task's fate.
TEST_F(ControlTest, AHandlerWhoseEntryWasDeletedUnderItIsNotFenced) {
  producer().enqueue("long", "{}");
  std::mutex m;
  std::string entry_id, why = "not returned";
  RunningConsumer rc(fast(), [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      {
        std::lock_guard lock(m);
        entry_id = t.entry_id();
      }
      const auto until = std::chrono::steady_clock::now() + 2500ms;  // 2.5 leases of 1000 ms
      while (!t.stop_requested() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(5ms);
      std::lock_guard lock(m);
      why = std::string(t.stop_reason());
    });
  });
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return !entry_id.empty();
  }));
  const std::string id = [&] {
    std::lock_guard lock(m);
    return entry_id;
  }();
  client.cmd({"XDEL", stream, id}).view().check();
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1; }, 10s));
  {
    std::lock_guard lock(m);
    EXPECT_EQ(why, "") << "the handler was stopped";
  }
  EXPECT_EQ(xlen(dlq), 0) << "its provisional record was replaced by its success";
  EXPECT_EQ(rc.consumer().metrics().handed_back, 0U);
  rc.stop();
}

// Redis out of reach (frozen) for longer than the leases: the holder stops the task by its own
// clock (four fifths of claim_min_idle after the last renewal of its entry's lease, or of its
// concurrency slot's), while the server is still frozen, before another worker could reclaim
// the entry or take the slot; the attempt is put back uncounted and runs again once the server
// is back. (On 377e4b4 a task without a slot ran on, frozen server or not.)
class CutOffHolder : public ControlTest, public ::testing::WithParamInterface<bool> {};

TEST_P(CutOffHolder, StopsItsTaskBeforeItsLeaseEnds) {
  const bool slot = GetParam();
  producer().enqueue("t", "{}", {.max_retries = 0});
  std::atomic<int> runs{0};
  std::atomic<bool> stopped{false};
  std::string why;
  ConsumerOptions o = fast();
  o.claim_min_idle = 2000ms;
  o.connection.socket_timeout = 1200ms;
  HandlerOptions limited;
  if (slot) limited.concurrency = {.limit = 1};
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on(
        "t",
        [&](const Task& task) {
          if (++runs > 1) return;
          why = wait_for_stop(task, 20s);
          stopped = true;
          throw std::runtime_error("stopped");
        },
        limited);
  });
  ASSERT_TRUE(wait_until([&] { return runs.load() == 1; }, 10s));
  const auto paused = std::chrono::steady_clock::now();
  server.pause();
  const bool fenced = wait_until([&] { return stopped.load(); }, 6s);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - paused);
  server.resume();
  ASSERT_TRUE(fenced) << "the task ran on while its leases ran out";
  std::cout << "stopped " << took.count() << " ms after the server froze (lease 2000 ms)\n";
  // The lease was last renewed before the freeze, so it ended at most claim_min_idle after it:
  // the promise is a stop before that, when no other worker could have reclaimed the entry yet
  // (the fence fires at four fifths of it; the rest is the margin for a loaded machine).
  EXPECT_LT(took, o.claim_min_idle) << "stopped after the lease ended";
  EXPECT_EQ(why, "lease_lost");
  ASSERT_TRUE(wait_until([&] { return runs.load() == 2 && xlen(stream) == 0 && pending() == 0; }, 30s));
  worker.stop();
  EXPECT_EQ(worker.consumer().metrics().retried, 0U) << "a fenced attempt is not a failure";
  EXPECT_EQ(worker.consumer().metrics().handed_back, 1U);
  EXPECT_EQ(xlen(dlq), 0) << "max_retries 0: a counted failure would have dead-lettered it";
}

INSTANTIATE_TEST_SUITE_P(Leases, CutOffHolder, ::testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "Slot" : "Entry"); });

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

TEST_F(ConsumerTest, IdleConsumersWithoutPendingEntriesAreRemovedFromTheGroup) {
  auto p = producer();
  p.enqueue("work", "{}");
  ASSERT_EQ(read_as("old-busy", 1).size(), 1u);  // a dead worker still holding an entry
  client.cmd({"XGROUP", "CREATECONSUMER", stream, "workers", "old-idle"}).view().check();
  const auto idle_of = [&](const std::string& name) -> std::int64_t {
    const detail::Reply r = client.cmd({"XINFO", "CONSUMERS", stream, "workers"});
    const auto v = r.view().check();
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].field("name").str() == name) return v[i].field("idle").as_int();
    }
    return -1;
  };
  ASSERT_TRUE(wait_until([&] { return idle_of("old-idle") >= 600 && idle_of("old-busy") >= 600; }));
  std::atomic<int> ran{0};
  auto o = options();
  o.consumer_name = "live";
  o.claim_min_idle = 300ms;
  o.heartbeat_interval = 100ms;
  o.reclaim_interval = 50ms;
  o.idle_consumer_timeout = 500ms;
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  // old-idle goes; old-busy stays while it holds an entry (deleting it would drop the entry),
  // until the reclaimer has taken that over and the task ran; this consumer is never removed.
  // The worker counts a removal after XGROUP DELCONSUMER has answered, so the count is waited
  // for as well: the group can already show only "live" while the count is still 1.
  ASSERT_TRUE(wait_until([&] {
    return consumer_names(client, stream) == std::set<std::string>{"live"} && pending() == 0 &&
           xlen(stream) == 0 && rc.consumer().metrics().consumers_removed >= 2;
  }));
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(rc.consumer().metrics().consumers_removed, 2u);
  EXPECT_EQ(rc.consumer().metrics().reclaimed, 1u);
}

}  // namespace
}  // namespace streamq::test
