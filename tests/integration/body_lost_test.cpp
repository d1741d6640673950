// SPDX-License-Identifier: MIT
// A task whose entry is deleted (trimmed) while a worker holds it ends in exactly one place:
// deleted while queued in the worker, it is dead-lettered once and never run; deleted while its
// handler runs, the provisional dead-letter record is replaced by the attempt's own outcome (done,
// a retry, a dead letter). Whatever else shares its entry id and whatever an operator does to
// the record meanwhile, it ends once; the notes that make this so expire on their own.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "gate.hpp"
#include "handler_ending.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(ConsumerTest, EntryDeletedWhileQueuedIsDeadLetteredOnceAndNeverRun) {
  auto p = producer();
  p.enqueue("block", "{}");
  p.enqueue("work", R"({"n":1})");
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
  ASSERT_EQ(entries.size(), 2u);
  // Delete the queued entry right after the holder's leases were set (delivery or renewal),
  // so its next lease pass is most of a second away while reclaimers pass every 50 ms: a
  // reclaimer that dead-letters deleted entries a live worker holds (as XAUTOCLAIM does on
  // Redis 7, idle or not) does so before the holder notices, and the holder then runs them.
  // It must be queued in the worker first (read, so pending): one still unread when it is
  // deleted is never delivered at all, and the test would wait for a dead letter in vain. (The
  // worker keeps one entry waiting behind its busy handler: see StartPace.)
  // (Each step says where it stopped: this test failed once, in a full local run, without a
  // message that survived.)
  ASSERT_TRUE(wait_until([&] { return pending() == 2; })) << "pending " << pending();
  ASSERT_TRUE(wait_until([&] { return pending_entry(blocker).idle_ms < 100; }))
      << "the blocker's idle time " << pending_entry(blocker).idle_ms << " ms";
  client.cmd({"XDEL", stream, entries[1].first});
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }))
      << "dead letters " << xlen(dlq) << ", pending " << pending() << ", ran " << ran << ", skipped "
      << rc.consumer().metrics().skipped;
  gate.open();
  ASSERT_TRUE(wait_until([&] { return pending() == 0 && xlen(stream) == 0; }))
      << "pending " << pending() << ", stream " << xlen(stream);
  rc.stop();
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(xlen(dlq), 1);
  std::set<std::string> originals, payloads;
  for (const auto& [id, f] : client.xrange(dlq)) {
    EXPECT_EQ(Client::get(f, "reason"), "body_lost");
    EXPECT_EQ(Client::get(f, "task_type"), "work");  // the fields the holder had read
    originals.insert(Client::get(f, "original_id"));
    payloads.insert(Client::get(f, "payload"));
  }
  EXPECT_EQ(originals, (std::set<std::string>{entries[1].first}));
  EXPECT_EQ(payloads, (std::set<std::string>{R"({"n":1})"}));
  const ConsumerMetrics m = rc.consumer().metrics();
  EXPECT_EQ(m.skipped, 1u);
  EXPECT_EQ(m.dead_lettered, 1u);
  EXPECT_EQ(m.done, 1u);
}

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

class BodyLostTest : public ConsumerTest {
 protected:
  std::string high = stream + ":p:high";

  std::int64_t pending_on(const std::string& key) {
    const detail::Reply r = client.cmd({"XPENDING", key, "workers"});
    return r.view().is_error() ? 0 : r.view()[0].integer();
  }
  /// The note orphan.lua keeps for entry `id` of `level_stream`.
  static std::string note(const std::string& level_stream, const std::string& id) {
    return level_stream + ":orphan:" + id;
  }
  Inspector inspector() const { return Inspector({.connection = {.url = server.url()}}); }

  /// A chord of one child ("long", then "sum") and a batch of one member of `member_type` whose
  /// on_complete task is "complete".
  struct ChildAndMember {
    FlowIds flow;
    std::string batch;
    std::string member;
  };
  ChildAndMember enqueue_child_and_member(const std::string& member_type) {
    Producer p = producer();
    ChildAndMember ids;
    ids.flow = p.enqueue_flow(
        chord({{.task_type = "long", .payload = "{}"}}, {.task_type = "sum", .payload = "{}"}));
    ids.batch = p.open_batch({.on_complete = TaskSpec{.task_type = "complete", .payload = "{}"}});
    ids.member = p.enqueue(member_type, "{}", {.batch = ids.batch});
    p.close_batch(ids.batch);
    return ids;
  }
  /// Notes that expire half a second after their holder stops renewing them, and a reclaimer
  /// that passes every 100 ms.
  ConsumerOptions short_notes() {
    auto o = options();
    o.heartbeat_interval = 100ms;
    o.claim_min_idle = 500ms;
    o.reclaim_interval = 100ms;
    return o;
  }
  /// Deletes a running task's entry (on a connection of its own: not the handlers'), then waits
  /// in `gate`. Thread-safe.
  class Deleter {
   public:
    explicit Deleter(const std::string& url, const std::string& stream) : client_(url), stream_(stream) {}
    void operator()(const Task& t, Gate& gate) {
      {
        const std::lock_guard lock(m_);
        client_.cmd({"XDEL", stream_, t.entry_id()}).view().check();
      }
      gate.pass(t.entry_id());
    }

   private:
    std::mutex m_;
    Client client_;
    std::string stream_;
  };
  /// Waits until the record of task `id` says dead.
  bool dead_soon(Inspector& in, const std::string& id) {
    return wait_until(
        [&] {
          const auto r = in.record(stream, id);
          return r && r->state == TaskRecord::State::dead;
        },
        10s);
  }
};

// Entry ids are unique only within one stream: two XADDs in one millisecond (a mixed-priority
// enqueue_batch) give a high and a normal task the same id. Both deleted under one worker, the
// queued high one must keep its record when the running normal one succeeds.
TEST_F(BodyLostTest, EntriesOfOneIdOnTwoLevelsEachEndInTheirOwnPlace) {
  const std::string normal_task = producer().enqueue("long", "{}");
  Gate gate;
  std::atomic<int> work_runs{0};
  auto o = options();
  o.concurrency = 1;  // the high task waits behind the running normal one
  o.prefetch = 4;
  o.heartbeat_interval = 300ms;
  o.claim_min_idle = 3000ms;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("long", [&](const Task& t) { gate.pass(t.entry_id()); });
    c.on("work", [&](const Task&) { ++work_runs; });
  });
  const auto release = gate.opens_on_exit();
  const std::string id = gate.arrived();
  ASSERT_FALSE(id.empty());
  client
      .cmd({"XADD", high, id, "task_id", "high-task", "task_type", "work", "payload", "{}", "created_at",
            "2026-12-03T00:00:00.000000", "max_retries", "3", "retry_count", "0"})
      .view()
      .check();
  ASSERT_TRUE(wait_until([&] { return pending_on(high) == 1; }));  // delivered, queued in the worker
  client.cmd({"XDEL", high, id}).view().check();
  client.cmd({"XDEL", stream, id}).view().check();
  // One record each: the high task's is final (it never started), the normal one's provisional.
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 2 && pending() == 0 && pending_on(high) == 0; }));
  // Both notes expire on their own; nothing is kept without a time to live.
  EXPECT_GT(client.integer({"PTTL", note(high, id)}), 0);
  EXPECT_GT(client.integer({"PTTL", note(stream, id)}), 0);
  EXPECT_EQ(client.integer({"EXISTS", stream + ":orphans"}), 0);
  gate.open();
  // The normal task succeeded: its own record goes, the high task's stays.
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1 && xlen(dlq) == 1; }));
  rc.stop();
  const auto dead = client.xrange(dlq);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(Client::get(dead[0].second, "task_id"), "high-task");
  EXPECT_EQ(Client::get(dead[0].second, "reason"), "body_lost");
  EXPECT_EQ(Client::get(dead[0].second, "original_id"), id);
  EXPECT_EQ(work_runs, 0);
  EXPECT_EQ(client.integer({"EXISTS", note(stream, id)}), 0);  // deleted with the record it named
  // The high task's record was final from the start (it never ran): a replay takes it at once,
  // although its note (kept for a repeated write) still stands.
  EXPECT_EQ(client.integer({"EXISTS", note(high, id)}), 1);
  EXPECT_EQ(inspector().replay(stream).done, 1);
}

enum class Act { purge, remove, replay };

class ProvisionalRecord : public BodyLostTest, public ::testing::WithParamInterface<Act> {};

// The record written while the handler runs is not the task's fate yet: an operator who
// purges or deletes it does not end the task (its retry is still written), and a replay
// leaves it alone (the task would run twice at once).
TEST_P(ProvisionalRecord, AnOperatorsActionKeepsTheRunningTasksOwnOutcome) {
  const Act act = GetParam();
  producer().enqueue("long", R"({"k":"v"})", {.max_retries = 1});
  Gate gate;
  std::atomic<int> first_runs{0}, retry_runs{0};
  auto o = options();
  o.heartbeat_interval = 200ms;
  o.claim_min_idle = 1000ms;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      if (t.retry_count() > 0) {
        ++retry_runs;
        return;
      }
      ++first_runs;
      gate.pass(t.entry_id());
      throw std::runtime_error("failed after the body went");
    });
  });
  const auto release = gate.opens_on_exit();
  const std::string id = gate.arrived();
  ASSERT_FALSE(id.empty());
  client.cmd({"XDEL", stream, id}).view().check();
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }));
  const std::string record = client.xrange(dlq).at(0).first;
  Inspector ins = inspector();
  switch (act) {
    case Act::purge: EXPECT_EQ(ins.purge_dead(stream), 1); break;
    case Act::remove: EXPECT_EQ(ins.delete_dead(stream, {.ids = {record}}).done, 1); break;
    case Act::replay: {
      const ActionResult r = ins.replay(stream);
      EXPECT_EQ(r.done, 0);
      EXPECT_EQ(r.skipped, 1);
      EXPECT_EQ(xlen(dlq), 1);
      EXPECT_EQ(xlen(stream), 0);
      break;
    }
  }
  gate.open();
  // The handler's failure is written as the task's fate: a retry copy, which runs.
  ASSERT_TRUE(wait_until([&] { return retry_runs == 1 && xlen(stream) == 0 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(first_runs, 1);
  EXPECT_EQ(xlen(dlq), 0);
  EXPECT_EQ(rc.consumer().metrics().retried, 1u);
  EXPECT_EQ(client.integer({"EXISTS", note(stream, id)}), 0);
}

INSTANTIATE_TEST_SUITE_P(Acts, ProvisionalRecord, ::testing::Values(Act::purge, Act::remove, Act::replay),
                         [](const auto& info) {
                           switch (info.param) {
                             case Act::purge: return std::string("Purge");
                             case Act::remove: return std::string("Delete");
                             case Act::replay: return std::string("Replay");
                           }
                           return std::string("unknown");
                         });

// The note lives as long as its holder renews it: while the handler runs, past
// claim_min_idle; once the holder is gone (here it stopped with its handler still running), it
// expires, and the record is final: a replay takes it.
TEST_F(BodyLostTest, ANoteOutlivesItsHolderByClaimMinIdleAtMost) {
  producer().enqueue("long", "{}");
  Gate gate;
  std::atomic<int> left{0};
  auto o = options();
  o.heartbeat_interval = 100ms;
  o.claim_min_idle = 500ms;
  o.shutdown_grace = 100ms;
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      gate.pass(t.entry_id());
      ++left;
    });
  });
  const auto release = gate.opens_on_exit();
  const std::string id = gate.arrived();
  ASSERT_FALSE(id.empty());
  client.cmd({"XDEL", stream, id}).view().check();
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }));
  const std::string key = note(stream, id);
  const std::int64_t first_ttl = client.integer({"PTTL", key});
  EXPECT_GT(first_ttl, 0);
  EXPECT_LE(first_ttl, 500);  // claim_min_idle
  // Renewed with the leases: its time to live goes up again, six times (at least five
  // heartbeats, so it lives on past claim_min_idle while the handler runs).
  std::int64_t last = first_ttl;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(wait_until([&] {
      const std::int64_t ttl = client.integer({"PTTL", key});
      const bool rose = ttl > last;  // it only falls between renewals
      last = ttl;
      return rose;
    }));
  }
  rc.stop();  // returns after shutdown_grace with the handler still in the gate
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", key}) == 0; }, 5s));
  EXPECT_EQ(inspector().replay(stream).done, 1);
  gate.open();
  ASSERT_TRUE(wait_until([&] { return left == 1; }));
}

// A flow's child and a batch's member whose entries are deleted while their handlers run, and
// whose worker then stops with the handlers still running: once the notes expire, their
// provisional records are their fate, and what the tasks belonged to learns it (through the
// one settle path): the child's parent fails (its policy, fail_parent), the batch counts a
// failed member and fires. Before, a provisional record became final only in the dead-letter
// stream: the parent waited forever and the batch never fired.
TEST_F(BodyLostTest, AProvisionalRecordWhoseHolderIsGoneEndsItsTaskForItsParentAndItsBatch) {
  const ChildAndMember ids = enqueue_child_and_member("long");
  Gate gate;
  auto o = short_notes();
  o.shutdown_grace = 100ms;
  Deleter delete_and_wait{server.url(), stream};
  RunningConsumer rc(o, [&](Consumer& c) { c.on("long", [&](const Task& t) { delete_and_wait(t, gate); }); });
  std::atomic<int> completes{0};
  const auto release = gate.opens_on_exit();  // (before the consumers go: their handlers return)
  ASSERT_FALSE(gate.arrived(2).empty());
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 2; }, 10s)) << "the provisional records";
  rc.stop();  // returns after shutdown_grace with both handlers still in the gate
  RunningConsumer other(o, [&](Consumer& c) {
    c.on("complete", [&](const Task&) { ++completes; });
    c.on("sum", [&](const Task&) { ADD_FAILURE() << "the parent ran without its failed child"; });
  });
  Inspector in = inspector();
  ASSERT_TRUE(dead_soon(in, ids.flow.task_id)) << "the parent did not learn its child's end";
  EXPECT_EQ(in.record(stream, ids.flow.task_id)->reason, "child_failed");
  EXPECT_EQ(in.record(stream, ids.flow.children[0].task_id)->state, TaskRecord::State::dead);
  EXPECT_EQ(in.record(stream, ids.member)->state, TaskRecord::State::dead);
  ASSERT_TRUE(wait_until([&] { return completes == 1; }, 10s)) << "the batch did not fire";
  EXPECT_EQ(in.batch(stream, ids.batch)->failed, 1);
  EXPECT_EQ(xlen(dlq), 2) << "each record stays, once";
}

// A holder cut off from the server for claim_min_idle is not gone. Once its notes expired, a
// reclaimer makes its provisional records the tasks' fate (the parent fails, the batch fires);
// when the holder is back, its late completions (the child's success, the member's failure, a
// retry) must settle nothing a second time: every record stays dead, nothing is retried, the
// batch fires once. The cut-off is played by deleting the notes, which is what their expiry
// does (the holder's renewals do not write an expired note again); the holder's next renewal
// finds them gone and stops both handlers, as a lost lease does.
TEST_F(BodyLostTest, AHolderBackAfterItsRecordsWereMadeTheTasksFateSettlesNothingASecondTime) {
  const ChildAndMember ids = enqueue_child_and_member("failing");
  Gate gate;
  std::atomic<int> completes{0};
  Deleter delete_and_wait{server.url(), stream};
  std::mutex told;
  std::multiset<std::string> stop_reasons;  // what each handler was told once the gate opened
  const auto run = [&](const Task& t) {
    delete_and_wait(t, gate);
    const std::lock_guard lock(told);
    stop_reasons.emplace(t.stop_reason());
  };
  RunningConsumer rc(short_notes(), [&](Consumer& c) {
    c.on("long", run);
    c.on("failing", [&](const Task& t) {
      run(t);
      throw std::runtime_error("fails after its end was settled");
    });
    c.on("complete", [&](const Task&) { ++completes; });
    c.on("sum", [&](const Task&) { ADD_FAILURE() << "the parent ran without its failed child"; });
  });
  const auto release = gate.opens_on_exit();
  const std::string first = gate.arrived(1);
  const std::string second = gate.arrived(2);
  ASSERT_FALSE(second.empty());
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 2; }, 10s)) << "the provisional records";
  for (const std::string& id : {first, second}) client.cmd({"DEL", note(stream, id)}).view().check();
  Inspector in = inspector();
  ASSERT_TRUE(dead_soon(in, ids.flow.task_id)) << "the parent did not learn its child's end";
  ASSERT_TRUE(wait_until([&] { return completes == 1; }, 10s)) << "the batch did not fire";
  gate.open();  // the holder is back: its handlers end, one in success, one in failure
  rc.stop();
  EXPECT_EQ(in.record(stream, ids.flow.children[0].task_id)->state, TaskRecord::State::dead);
  EXPECT_EQ(in.record(stream, ids.member)->state, TaskRecord::State::dead);
  EXPECT_EQ(in.record(stream, ids.flow.task_id)->state, TaskRecord::State::dead);
  EXPECT_EQ(in.batch(stream, ids.batch)->failed, 1);
  EXPECT_EQ(completes, 1);
  EXPECT_EQ(xlen(dlq), 2) << "each record stays, once";
  EXPECT_EQ(xlen(stream), 0) << "nothing was retried or enqueued again";
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0) << "nothing was retried";
  EXPECT_EQ(stop_reasons, (std::multiset<std::string>{"lease_lost", "lease_lost"}));
}

}  // namespace
}  // namespace streamq::test
