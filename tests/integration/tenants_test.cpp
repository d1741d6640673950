// SPDX-License-Identifier: MIT
// Fair queues per tenant on a real server (docs/tenants.md): tenants served in turn and by
// weight, a tenant's concurrency limit across workers, its depth limit, a retry back to its
// tenant, and no keys left once a tenant has nothing left.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "at_once.hpp"
#include "chaos.hpp"
#include "consumer_fixture.hpp"
#include "gate.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class TenantsTest : public ConsumerTest {
 protected:
  Producer big_producer() const {
    return Producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  }
  /// Enqueues `n` tasks of type "work" for `tenant`, in one batch.
  static void enqueue_for(Producer& p, const std::string& tenant, int n) {
    std::vector<TaskSpec> tasks;
    for (int i = 0; i < n; ++i) tasks.push_back({"work", nlohmann::json{{"t", tenant}}, {.tenant = tenant}});
    p.enqueue_batch(tasks);
  }
  /// The tenant of every "work" task, in the order the handlers start them.
  class StartLog {
   public:
    void add(const Task& t) {
      const std::lock_guard lock(m_);
      starts_.push_back(t.json()["t"].get<std::string>());
    }
    std::vector<std::string> starts() const {
      const std::lock_guard lock(m_);
      return starts_;
    }
    std::size_t size() const {
      const std::lock_guard lock(m_);
      return starts_.size();
    }

   private:
    mutable std::mutex m_;
    std::vector<std::string> starts_;
  };
  /// How many of the first `n` starts were of each tenant.
  static std::map<std::string, int> first(const std::vector<std::string>& starts, std::size_t n) {
    std::map<std::string, int> out;
    for (std::size_t i = 0; i < std::min(n, starts.size()); ++i) ++out[starts[i]];
    return out;
  }
  /// The keys of the queue's tenants (their backlogs, the ready and waiting sets, slots, rate
  /// windows), but not their settings nor what the queue keeps whatever its tenants (the pass,
  /// the consumers' lease and group).
  std::vector<std::string> tenant_keys() {
    std::vector<std::string> out;
    for (const char* pattern : {":tenant:*", ":tenants:*"}) {
      const detail::Reply r = client.cmd({"KEYS", stream + pattern});
      for (std::size_t i = 0; i < r.view().size(); ++i) {
        std::string k(r.view()[i].str());
        if (k == stream + ":tenants:pass" || k == stream + ":tenants:worker" ||
            k.starts_with(stream + ":tenants:config:") || k == stream + ":tenants:defaults") {
          continue;
        }
        out.push_back(k);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  Inspector inspector() const { return Inspector({.connection = {.url = server.url()}}); }
  /// One worker that runs one task at a time, reading one at a time: its start order is the
  /// order the dispatch moved the tasks in.
  ConsumerOptions one_at_a_time() const {
    auto o = options();
    o.concurrency = 1;
    o.prefetch = 1;
    return o;
  }
};

// A tenant with a big backlog gets its turn and no more: the others' tasks, enqueued behind
// it, start within the first rounds.
TEST_F(TenantsTest, TenantsThatHaveWorkAreServedInTurn) {
  Producer p = big_producer();
  enqueue_for(p, "a", 60);
  enqueue_for(p, "b", 3);
  enqueue_for(p, "c", 3);
  EXPECT_EQ(xlen(stream), 0) << "a tenant's tasks wait in its backlog";
  StartLog log;
  RunningConsumer rc(one_at_a_time(), [&](Consumer& c) { c.on("work", [&](const Task& t) { log.add(t); }); });
  ASSERT_TRUE(wait_until([&] { return log.size() == 66; }, 20s));
  const auto starts = log.starts();
  EXPECT_EQ(first(starts, 9), (std::map<std::string, int>{{"a", 3}, {"b", 3}, {"c", 3}}));
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << "a tenant with nothing left leaves no keys: " << ::testing::PrintToString(tenant_keys());
}

// A tenant of weight 3 gets three turns to one of weight 1.
TEST_F(TenantsTest, ATenantsWeightIsItsShareOfTheTurns) {
  inspector().set_tenant(stream, "b", {.weight = 3});
  Producer p = big_producer();
  enqueue_for(p, "a", 40);
  enqueue_for(p, "b", 40);
  StartLog log;
  RunningConsumer rc(one_at_a_time(), [&](Consumer& c) { c.on("work", [&](const Task& t) { log.add(t); }); });
  ASSERT_TRUE(wait_until([&] { return log.size() == 80; }, 20s));
  const auto counts = first(log.starts(), 40);
  EXPECT_GE(counts.at("b"), 29) << counts.at("a") << " of a";
  EXPECT_LE(counts.at("b"), 31) << counts.at("a") << " of a";
}

// A tenant's concurrency limit holds across every worker, while tenants without one run
// beside it.
TEST_F(TenantsTest, ATenantsConcurrencyLimitHoldsAcrossWorkers) {
  inspector().set_tenant(stream, "a", {.concurrency = 2});
  Producer p = big_producer();
  enqueue_for(p, "a", 20);
  enqueue_for(p, "b", 20);
  AtOnce at_once_a, at_once_b;
  std::atomic<int> done{0};
  const auto setup = [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      AtOnce& at_once = t.json()["t"] == "a" ? at_once_a : at_once_b;
      at_once.enter();
      std::this_thread::sleep_for(30ms);
      at_once.leave();
      ++done;
    });
  };
  auto o = options();
  o.concurrency = 4;
  RunningConsumer w1(o, setup);
  RunningConsumer w2(o, setup);
  ASSERT_TRUE(wait_until([&] { return done == 40; }, 30s));
  EXPECT_EQ(at_once_a.most(), 2);
  EXPECT_GT(at_once_b.most(), 2) << "the limit is the tenant's, not the queue's";
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << ::testing::PrintToString(tenant_keys());
}

// A tenant's task dispatched into the stream keeps its slot while it waits there unread, however
// long (past its slot's lease): the tenant's next task does not start beside it.
TEST_F(TenantsTest, ATaskWaitingUnreadInTheStreamKeepsItsTenantsSlot) {
  inspector().set_tenant(stream, "a", {.concurrency = 1});
  AtOnce at_once_a;
  std::atomic<int> long_started{0}, done_a{0};
  const auto setup = [&](Consumer& c) {
    c.on("long", [&](const Task&) {
      ++long_started;
      std::this_thread::sleep_for(1500ms);
    });
    c.on("a", [&](const Task&) {
      at_once_a.enter();
      std::this_thread::sleep_for(300ms);
      at_once_a.leave();
      ++done_a;
    });
  };
  auto o = options();
  o.concurrency = 1;
  o.prefetch = 1;
  o.heartbeat_interval = 100ms;
  o.claim_min_idle = 500ms;  // the slots' lease
  Producer p = producer();
  p.enqueue("long", "{}");
  p.enqueue("long", "{}");
  RunningConsumer w1(o, setup);
  RunningConsumer w2(o, setup);
  ASSERT_TRUE(wait_until([&] { return long_started == 2; }, 10s));
  // Both workers busy: the first goes straight to the stream with its slot, unread for 1 s.
  p.enqueue("a", "{}", {.tenant = "a"});
  p.enqueue("a", "{}", {.tenant = "a"});
  ASSERT_TRUE(wait_until([&] { return done_a == 2; }, 10s));
  EXPECT_EQ(at_once_a.most(), 1);
}

// A flow's parent of a tenant with a concurrency limit of 1 holds its tenant's slot while it
// runs: a task of the tenant enqueued meanwhile waits for it.
TEST_F(TenantsTest, AFlowsParentHoldsItsTenantsSlot) {
  inspector().set_tenant(stream, "a", {.concurrency = 1});
  std::atomic<int> parent_running{0}, overlapped{0}, other_done{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("child", [](const Task&) {});
    c.on("parent", [&](const Task&) {
      ++parent_running;
      std::this_thread::sleep_for(500ms);
      --parent_running;
    });
    c.on("other", [&](const Task&) {
      if (parent_running > 0) ++overlapped;
      ++other_done;
    });
  });
  Producer p = producer();
  p.enqueue_flow(chord({{.task_type = "child", .payload = "{}", .options = {.tenant = "a"}}},
                       {.task_type = "parent", .payload = "{}", .options = {.tenant = "a"}}));
  ASSERT_TRUE(wait_until([&] { return parent_running == 1; }, 10s));
  p.enqueue("other", "{}", {.tenant = "a"});
  ASSERT_TRUE(wait_until([&] { return other_done == 1; }, 10s));
  EXPECT_EQ(overlapped, 0) << "the tenant's next task ran beside its flow's parent";
}

// A tenant at its concurrency limit whose last task just moved waits for nothing: it is neither
// ready nor waiting (not listed, and its next task may go straight to the stream).
TEST_F(TenantsTest, ATenantWhoseLastTaskMovedIsNotLeftWaiting) {
  inspector().set_tenant(stream, "a", {.concurrency = 1});
  Producer p = producer();
  p.enqueue("held", "{}", {.tenant = "a"});
  Gate gate;
  RunningConsumer rc(options(),
                     [&](Consumer& c) { c.on("held", [&](const Task& t) { gate.pass(t.entry_id()); }); });
  const auto release = gate.opens_on_exit();
  ASSERT_FALSE(gate.arrived().empty());
  EXPECT_EQ(client.integer({"EXISTS", stream + ":tenants:waiting", stream + ":tenants:ready"}), 0);
  EXPECT_TRUE(inspector().tenants(stream).empty());
}

// A cancel of a task waiting in its tenant's backlog leaves the slot of a running task of the
// same id alone (task ids given by the caller may repeat): the waiting one held none.
TEST_F(TenantsTest, CancellingABacklogTaskLeavesTheSlotOfARunningOneOfTheSameId) {
  inspector().set_tenant(stream, "a", {.concurrency = 1});
  Producer p = producer();
  p.enqueue("held", "{}", {.task_id = "dup", .tenant = "a"});
  Gate gate;
  RunningConsumer rc(options(),
                     [&](Consumer& c) { c.on("held", [&](const Task& t) { gate.pass(t.entry_id()); }); });
  const auto release = gate.opens_on_exit();
  ASSERT_FALSE(gate.arrived().empty());
  p.enqueue("held", "{}", {.task_id = "dup", .tenant = "a"});
  ASSERT_EQ(client.integer({"LLEN", stream + ":tenant:a"}), 1);
  EXPECT_EQ(inspector().cancel(stream, "dup"), CancelOutcome::cancelled);
  EXPECT_EQ(client.integer({"LLEN", stream + ":tenant:a"}), 0);
  EXPECT_EQ(client.integer({"HEXISTS", stream + ":tenants:slots:a", "dup"}), 1)
      << "the running task's slot was given back by the waiting one's cancel";
}

// A dead-lettered tenant's task replayed goes back to its tenant: it waits in the backlog while
// its tenant is paused.
TEST_F(TenantsTest, AReplayedTaskGoesBackToItsTenant) {
  Producer p = producer();
  p.enqueue("doomed", "{}", {.max_retries = 0, .tenant = "a"});
  {
    RunningConsumer rc(
        options(), [&](Consumer& c) { c.on("doomed", [](const Task&) { throw std::runtime_error("no"); }); });
    ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 10s));
  }
  Inspector in = inspector();
  in.pause_tenant(stream, "a");
  EXPECT_EQ(in.replay(stream).done, 1);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(client.integer({"LLEN", stream + ":tenant:a"}), 1);
}

// A delayed tenant's task run now enters its tenant's backlog, not the stream: run_now says so
// (it has no entry yet), and it starts in its tenant's turn.
TEST_F(TenantsTest, ADelayedTenantsTaskRunNowEntersItsTenantsBacklog) {
  Producer p = producer();
  p.enqueue("work", nlohmann::json{{"t", "a"}}, {.task_id = "later", .delay = 1h, .tenant = "a"});
  Inspector in = inspector();
  in.pause_tenant(stream, "a");
  EXPECT_EQ(in.run_now(stream, "later"), std::optional<std::string>("tenant:a"));
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(client.integer({"LLEN", stream + ":tenant:a"}), 1);
  StartLog log;
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task& t) { log.add(t); }); });
  in.resume_tenant(stream, "a");
  ASSERT_TRUE(wait_until([&] { return log.size() == 1; }, 10s));
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 10s)) << "its backlog and slot are gone";
}

// A tenant's depth limit refuses that tenant's tasks only.
TEST_F(TenantsTest, AFullTenantRefusesOnlyItsOwnTasks) {
  inspector().set_tenant_defaults(stream, {.max_len = 2});
  Producer p = producer();
  p.enqueue("work", "{}", {.tenant = "a"});
  p.enqueue("work", "{}", {.tenant = "a"});
  EXPECT_THROW(p.enqueue("work", "{}", {.tenant = "a"}), QueueFullError);
  EXPECT_NO_THROW(p.enqueue("work", "{}", {.tenant = "b"}));
  EXPECT_NO_THROW(p.enqueue("work", "{}"));
  inspector().set_tenant(stream, "a", {.max_len = 3});  // its own wins over the default
  EXPECT_NO_THROW(p.enqueue("work", "{}", {.tenant = "a"}));
  EXPECT_THROW(p.enqueue("work", "{}", {.tenant = "a"}), QueueFullError);
}

// A failed task's retry goes back to its tenant's backlog, and runs in its turn.
TEST_F(TenantsTest, ARetryGoesBackToItsTenant) {
  Producer p = producer();
  const std::string id = p.enqueue("flaky", "{}", {.tenant = "a"});
  std::atomic<int> runs{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task&) {
      if (++runs == 1) throw std::runtime_error("first attempt fails");
    });
  });
  ASSERT_TRUE(wait_until([&] { return runs == 2; }, 10s));
  ASSERT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << ::testing::PrintToString(tenant_keys());
  EXPECT_EQ(xlen(dlq), 0);
}

// A paused tenant's tasks wait in its backlog while the others run; once resumed they run.
TEST_F(TenantsTest, APausedTenantsTasksWaitUntilItIsResumed) {
  Inspector in = inspector();
  in.pause_tenant(stream, "a");
  Producer p = big_producer();
  enqueue_for(p, "a", 3);
  enqueue_for(p, "b", 3);
  StartLog log;
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task& t) { log.add(t); }); });
  ASSERT_TRUE(wait_until([&] { return log.size() == 3; }, 10s));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(first(log.starts(), 10), (std::map<std::string, int>{{"b", 3}}));
  const std::vector<TenantInfo> listed = in.tenants(stream);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].tenant, "a");
  EXPECT_EQ(listed[0].backlog, 3);
  EXPECT_TRUE(listed[0].paused);
  in.resume_tenant(stream, "a");
  ASSERT_TRUE(wait_until([&] { return log.size() == 6; }, 10s));
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << ::testing::PrintToString(tenant_keys());
  EXPECT_TRUE(in.tenants(stream).empty());
}

// A tenant's rate limit: at most 2 starts in any 400 ms, across the workers.
TEST_F(TenantsTest, ATenantsRateLimitSpacesItsStarts) {
  inspector().set_tenant(stream, "a", {.rate_limit = 2, .rate_per = 400ms});
  Producer p = big_producer();
  enqueue_for(p, "a", 6);
  std::mutex m;
  std::vector<std::chrono::steady_clock::time_point> starts;
  const auto setup = [&](Consumer& c) {
    c.on("work", [&](const Task&) {
      const std::lock_guard lock(m);
      starts.push_back(std::chrono::steady_clock::now());
    });
  };
  RunningConsumer w1(options(), setup);
  RunningConsumer w2(options(), setup);
  ASSERT_TRUE(wait_until(
      [&] {
        const std::lock_guard lock(m);
        return starts.size() == 6;
      },
      10s));
  const std::lock_guard lock(m);
  std::sort(starts.begin(), starts.end());
  for (std::size_t i = 2; i < starts.size(); ++i) {
    // (The window is the server's: 5 ms for the clocks' and the handlers' latency.)
    EXPECT_GE(starts[i] - starts[i - 2], 395ms) << "starts " << i - 2 << " and " << i;
  }
}

// A worker killed with -9 while it runs a tenant's only allowed task keeps that task's slot
// until another worker has taken the entry over and ended it: the tenant's next task does not
// start beside the reclaimed one.
TEST_F(TenantsTest, ATenantsLimitHoldsWhileAKilledWorkersTaskIsTakenOver) {
  inspector().set_tenant(stream, "a", {.concurrency = 1});
  Producer p = producer();
  p.enqueue("limited", R"({"ms":1500})", {.tenant = "a"});
  p.enqueue("limited", R"({"ms":300})", {.tenant = "a"});
  const auto worker = [&](const char* name) {
    return std::vector<std::string>{STREAMQ_TEST_WORKER, server.url(),       stream,     name,
                                    "min_idle_ms=1000",  "heartbeat_ms=200", "limit=100"};
  };
  auto first = std::make_unique<WorkerProcess>(worker("w1"));
  const std::string running = stream + ":now-running";
  ASSERT_TRUE(wait_until([&] { return client.integer({"SCARD", running}) == 1; }, 20s));
  client.cmd({"SADD", stream + ":killed", "w1"}).view().check();
  first->kill9();
  client.cmd({"DEL", running}).view().check();
  client.cmd({"SET", stream + ":most", "0"}).view().check();
  WorkerProcess second(worker("w2"));
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) == 2; }, 30s));
  EXPECT_EQ(std::string(client.cmd({"GET", stream + ":most"}).view().str()), "1");
  second.signal_and_wait(SIGTERM);
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << ::testing::PrintToString(tenant_keys());
}

// A holder frozen (SIGSTOP) past its lease: another worker takes its task over, and the tenant's
// next task waits until that run ended; the frozen holder, resumed, is stopped by its fence, and
// its put-back changes nothing (a stale one).
TEST_F(TenantsTest, ATenantsLimitHoldsWhileAFrozenHoldersTaskIsTakenOver) {
  inspector().set_tenant(stream, "a", {.concurrency = 1});
  Producer p = producer();
  const std::string first = p.enqueue("polite", R"({"ms":4000})", {.tenant = "a"});
  const std::string second = p.enqueue("polite", R"({"ms":100})", {.tenant = "a"});
  const auto worker = [&](const char* name) {
    return std::vector<std::string>{STREAMQ_TEST_WORKER, server.url(),      stream, name,
                                    "min_idle_ms=1000",  "heartbeat_ms=200"};
  };
  const auto log = [&] {
    std::vector<std::string> out;
    const detail::Reply r = client.cmd({"LRANGE", stream + ":log", "0", "-1"});
    for (std::size_t i = 0; i < r.view().size(); ++i) out.emplace_back(r.view()[i].str());
    return out;
  };
  const auto at = [](const std::vector<std::string>& lines, const std::string& suffix) -> std::ptrdiff_t {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].ends_with(suffix)) return static_cast<std::ptrdiff_t>(i);
    }
    return -1;
  };
  WorkerProcess w1(worker("w1"));
  ASSERT_TRUE(wait_until([&] { return at(log(), "w1/" + first + " start") >= 0; }, 20s));
  w1.signal(SIGSTOP);
  WorkerProcess w2(worker("w2"));
  ASSERT_TRUE(wait_until([&] { return at(log(), "w2/" + first + " start") >= 0; }, 20s));
  w1.signal(SIGCONT);
  ASSERT_TRUE(wait_until([&] { return at(log(), "/" + second + " end") >= 0; }, 20s));
  const auto lines = log();
  EXPECT_GT(at(lines, "/" + second + " start"), at(lines, "w2/" + first + " end"))
      << "the tenant's next task started while its first one ran: " << ::testing::PrintToString(lines);
  EXPECT_GE(at(lines, "w1/" + first + " stopped"), 0) << ::testing::PrintToString(lines);
  EXPECT_LT(at(lines, "w1/" + first + " end"), 0) << ::testing::PrintToString(lines);
  w1.signal_and_wait(SIGTERM);
  w2.signal_and_wait(SIGTERM);
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << ::testing::PrintToString(tenant_keys());
}

// 100,000 tenants with a task each drain, and leave no keys behind.
TEST_F(TenantsTest, AHundredThousandTenantsWithATaskEachDrain) {
  constexpr int kTenants = 100000;
  Producer p = big_producer();
  std::vector<TaskSpec> batch;
  for (int i = 0; i < kTenants; ++i) {
    batch.push_back({"work", "{}", {.tenant = "t" + std::to_string(i)}});
    if (batch.size() == 1000) {
      p.enqueue_batch(batch);
      batch.clear();
    }
  }
  EXPECT_EQ(client.integer({"ZCARD", stream + ":tenants:ready"}), kTenants);
  std::atomic<int> done{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++done; }); });
  ASSERT_TRUE(wait_until([&] { return done == kTenants; }, 120s)) << done;
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 10s)) << tenant_keys().size() << " keys left";
}

// In a partitioned queue a tenant lives in one partition (its name's), so its limits hold
// across the queue; a consumer of the queue serves every partition's tenants.
TEST_F(TenantsTest, APartitionedQueuesTenantLivesInOnePartition) {
  constexpr int kPartitions = 4;
  const std::string queue = "tq-" + std::to_string(::getpid());
  Producer p({.connection = {.url = server.url()}, .stream = queue, .partitions = kPartitions});
  for (int i = 0; i < 8; ++i) p.enqueue("work", "{}", {.tenant = "x"});
  std::vector<std::int64_t> backlogs;
  for (int i = 0; i < kPartitions; ++i) {
    backlogs.push_back(
        client.integer({"LLEN", detail::partition_stream(queue, kPartitions, i) + ":tenant:x"}));
  }
  std::sort(backlogs.begin(), backlogs.end());
  EXPECT_EQ(backlogs, (std::vector<std::int64_t>{0, 0, 0, 8}));
  EXPECT_THROW(p.enqueue("work", "{}", {.unique_for = 1min, .tenant = "x"}), ConfigError);
  auto o = options();
  o.stream = queue;
  o.partitions = kPartitions;
  std::atomic<int> runs{0};
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++runs; }); });
  EXPECT_TRUE(wait_until([&] { return runs == 8; }, 10s));
}

// An idle worker blocks on the queue's streams: a tenant's tasks reach it anyway, the first
// straight (its tenant's turn at once) and the next ones within the 50 ms a worker that saw no
// tenant waits between dispatches, not after its whole `block`.
TEST_F(TenantsTest, AnIdleWorkerTakesATenantsTasksWithoutWaitingOutItsBlock) {
  auto o = options();
  o.block = 3s;
  o.connection.socket_timeout = 5s;
  std::atomic<int> runs{0};
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++runs; }); });
  // Its read blocked (after its first dispatch, which saw no tenant):
  ASSERT_TRUE(wait_until([&] {
    const std::string info(client.cmd({"INFO", "clients"}).view().str());
    return info.find("blocked_clients:0") == std::string::npos;
  }));
  Producer p = producer();
  const auto start = std::chrono::steady_clock::now();
  p.enqueue("work", "{}", {.tenant = "a"});
  p.enqueue("work", "{}", {.tenant = "a"});
  ASSERT_TRUE(wait_until([&] { return runs == 2; }, 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
}

// The tasks waiting in the tenants' backlogs are listed a page at a time: the tenants in the
// ready set's order (all at the same pass: by name), each one's levels high to low, oldest first.
TEST_F(TenantsTest, BacklogTasksAreListedPageByPageWithACursor) {
  Producer p = big_producer();
  std::vector<std::string> expected;  // task ids in the listing's order
  std::vector<TaskSpec> tasks;
  const auto add = [&](const std::string& tenant, int n, Priority level) {
    for (int i = 0; i < n; ++i) {
      const std::string id = tenant + "-" + std::string(to_string(level)) + "-" + std::to_string(i);
      tasks.push_back(
          {"work", nlohmann::json{{"t", tenant}}, {.task_id = id, .priority = level, .tenant = tenant}});
    }
  };
  add("c", 50, Priority::low);
  add("a", 100, Priority::normal);
  add("b", 60, Priority::normal);  // enqueued before its high ones: listed after them
  add("b", 40, Priority::high);
  p.enqueue_batch(tasks);
  for (const auto& [prefix, n] : std::vector<std::pair<std::string, int>>{
           {"a-normal-", 100}, {"b-high-", 40}, {"b-normal-", 60}, {"c-low-", 50}}) {
    for (int i = 0; i < n; ++i) expected.push_back(prefix + std::to_string(i));
  }
  ASSERT_EQ(xlen(stream), 0);

  Inspector in = inspector();
  std::vector<std::string> listed;
  std::vector<std::size_t> sizes;
  TaskQuery q{.state = TaskState::backlog, .count = 100};
  for (int page = 0; page < 10; ++page) {
    const TaskPage got = in.tasks(stream, q);
    sizes.push_back(got.tasks.size());
    for (const TaskInfo& t : got.tasks) {
      EXPECT_EQ(t.state, TaskState::backlog);
      EXPECT_EQ(t.id, t.task_id());
      const std::string tenant(t.field("streamq_tenant"));
      EXPECT_EQ(t.key, detail::tenant_backlog_key(stream, tenant, t.level)) << t.id;
      EXPECT_EQ(t.id.substr(0, t.id.find('-', 2)), tenant + "-" + std::string(to_string(t.level)));
      EXPECT_EQ(t.task_type(), "work");
      EXPECT_TRUE(t.partition.empty());
      listed.push_back(t.id);
    }
    if (got.next_cursor.empty()) break;
    EXPECT_TRUE(got.next_cursor.starts_with("b:")) << got.next_cursor;
    q.cursor = got.next_cursor;
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{100, 100, 50}));
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(to_string(TaskState::backlog), "backlog");
  EXPECT_EQ(parse_task_state("backlog"), TaskState::backlog);

  // One level only.
  const TaskPage high =
      in.tasks(stream, {.state = TaskState::backlog, .level = Priority::high, .count = 1000});
  ASSERT_EQ(high.tasks.size(), 40U);
  EXPECT_TRUE(high.next_cursor.empty());
  for (const TaskInfo& t : high.tasks) EXPECT_EQ(t.level, Priority::high);
  EXPECT_EQ(high.tasks.front().id, "b-high-0");

  for (const char* bad :
       {"x", "b:3:1:0:0:61", "b:1:5:0:0:61", "b:1:1:0:0:6", "b:1:1:-1:0:61", "b:1:1:0:zero:61", "d:0:61"}) {
    EXPECT_THROW(in.tasks(stream, {.state = TaskState::backlog, .cursor = bad}), ConfigError) << bad;
  }
  EXPECT_THROW(in.tasks(stream, {.state = TaskState::queued, .cursor = "b:1:1:0:0:61"}), ConfigError);
}

// A listing goes on while the tenants are served: a tenant whose turns moved it (a new pass, or
// gone from the set) is continued after where it stood; nothing throws, and every tenant's
// tasks after the cursor's are still listed.
TEST_F(TenantsTest, ABacklogListingGoesOnWhileTheTenantsAreServed) {
  Producer p = big_producer();
  enqueue_for(p, "a", 20);
  enqueue_for(p, "b", 20);
  enqueue_for(p, "c", 20);
  Inspector in = inspector();
  const auto tenants_of = [](const TaskPage& page) {
    std::vector<std::string> out;
    for (const TaskInfo& t : page.tasks) out.emplace_back(t.field("streamq_tenant"));
    return out;
  };
  TaskPage first = in.tasks(stream, {.state = TaskState::backlog, .count = 15});
  ASSERT_EQ(first.tasks.size(), 15U);
  // a's turns took it all meanwhile: it left the ready set, its list is gone.
  client.cmd({"DEL", stream + ":tenant:a"});
  client.cmd({"ZREM", stream + ":tenants:ready", "a"});
  TaskPage second = in.tasks(stream, {.state = TaskState::backlog, .cursor = first.next_cursor, .count = 25});
  const std::vector<std::string> got = tenants_of(second);
  ASSERT_EQ(got.size(), 25U);
  EXPECT_EQ(std::count(got.begin(), got.end(), "b"), 20);
  EXPECT_EQ(std::count(got.begin(), got.end(), "c"), 5);
  EXPECT_EQ(second.tasks.front().task_id(),
            in.tasks(stream, {.state = TaskState::backlog, .count = 1}).tasks[0].task_id());
  // b was served 3 tasks and went on at a later pass: the listing goes on after where it stood
  // (c), and comes to b again.
  for (int i = 0; i < 3; ++i) client.cmd({"LPOP", stream + ":tenant:b"});
  client.cmd({"ZADD", stream + ":tenants:ready", "3000000", "b"});
  std::vector<std::string> rest;
  std::string cursor = second.next_cursor;
  for (int page = 0; page < 20 && !cursor.empty(); ++page) {
    const TaskPage next = in.tasks(stream, {.state = TaskState::backlog, .cursor = cursor, .count = 7});
    for (const std::string& t : tenants_of(next)) rest.push_back(t);
    cursor = next.next_cursor;
  }
  EXPECT_TRUE(cursor.empty());
  EXPECT_EQ(std::count(rest.begin(), rest.end(), "c"), 15);
  EXPECT_EQ(std::count(rest.begin(), rest.end(), "b"), 17);
  EXPECT_EQ(rest.front(), "c");
  EXPECT_EQ(rest.back(), "b");
}

// In a partitioned queue the backlogs of every partition are listed, each task with its
// partition, and the cursor names the partition it goes on in.
TEST_F(TenantsTest, APartitionedQueuesBacklogsAreListedPartitionByPartition) {
  constexpr int kPartitions = 4;
  const std::string queue = "tb-" + std::to_string(::getpid());
  auto o = options();
  o.stream = queue;
  o.partitions = kPartitions;
  {
    // A worker creates the partitions' streams: how the Inspector knows the queue's partitions.
    RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [](const Task&) {}); });
    const std::string last = detail::partition_stream(queue, kPartitions, kPartitions - 1);
    ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", last}) == 1; }, 10s));
  }
  Inspector in = inspector();
  Producer p({.connection = {.url = server.url()}, .stream = queue, .partitions = kPartitions});
  std::set<std::string> ids;
  for (int t = 0; t < 8; ++t) {
    in.pause_tenant(queue, "t" + std::to_string(t));  // (else the first task goes straight to its stream)
    for (int i = 0; i < 5; ++i) ids.insert(p.enqueue("work", "{}", {.tenant = "t" + std::to_string(t)}));
  }
  std::set<std::string> listed, partitions;
  TaskQuery q{.state = TaskState::backlog, .count = 7};
  int pages = 0;
  for (; pages < 20; ++pages) {
    const TaskPage got = in.tasks(queue, q);
    for (const TaskInfo& t : got.tasks) {
      EXPECT_TRUE(listed.insert(t.id).second) << t.id;
      EXPECT_TRUE(detail::is_partition_of(queue, t.partition)) << t.partition;
      EXPECT_TRUE(t.key.starts_with(t.partition + ":tenant:")) << t.key;
      partitions.insert(t.partition);
    }
    if (got.next_cursor.empty()) break;
    EXPECT_NE(got.next_cursor.find("/b:"), std::string::npos) << got.next_cursor;
    q.cursor = got.next_cursor;
  }
  EXPECT_EQ(listed, ids);
  EXPECT_GT(partitions.size(), 1U);
  const std::string one = *ids.begin();
  const auto found = in.task(queue, one);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->state, TaskState::backlog);
  EXPECT_FALSE(found->partition.empty());
  const QueueStats st = in.stats(queue);
  EXPECT_EQ(st.backlog, 40);
  EXPECT_EQ(st.backlog_tenants, 8);
  EXPECT_EQ(in.cancel(queue, one), CancelOutcome::cancelled);
  EXPECT_EQ(in.stats(queue).backlog, 39);
}

// task() finds a task waiting in its tenant's backlog by its task_id, with its record.
TEST_F(TenantsTest, ATaskInItsTenantsBacklogIsFoundByItsTaskId) {
  Producer p = big_producer();
  enqueue_for(p, "a", 1500);  // more than a page of the search
  const std::string id =
      p.enqueue("work", "{}", {.priority = Priority::low, .retention = Retention{.done = 1h}, .tenant = "a"});
  Inspector in = inspector();
  const auto found = in.task(stream, id);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->state, TaskState::backlog);
  EXPECT_EQ(found->id, id);
  EXPECT_EQ(found->level, Priority::low);
  EXPECT_EQ(found->key, stream + ":tenant:a:p:low");
  EXPECT_EQ(found->field("streamq_tenant"), "a");
  ASSERT_TRUE(found->record);
  EXPECT_EQ(found->record->state, TaskRecord::State::queued);
  EXPECT_FALSE(in.task(stream, "no-such-task"));
  const auto last = in.tasks(stream, {.state = TaskState::backlog, .count = 1500}).tasks.back();
  const auto again = in.task(stream, std::string(last.task_id()));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->fields, last.fields);
}

// Cancelling a task waiting in its tenant's backlog removes it and ends it cancelled; a paused
// tenant (waiting at +inf, which no turn looks at) whose last task is cancelled leaves no keys.
TEST_F(TenantsTest, CancellingATaskInItsTenantsBacklogRemovesIt) {
  Inspector in = inspector();
  in.pause_tenant(stream, "a");
  Producer p = producer();
  const std::string first = p.enqueue("work", "{}", {.retention = Retention{.done = 1h}, .tenant = "a"});
  const std::string second = p.enqueue("work", "{}", {.priority = Priority::high, .tenant = "a"});
  {
    // A worker's dispatch finds the tenant paused: it waits at +inf.
    RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [](const Task&) {}); });
    ASSERT_TRUE(wait_until(
        [&] {
          return client.cmd({"ZSCORE", stream + ":tenants:waiting", "a"}).view().is_string();
        },
        10s));
  }
  EXPECT_EQ(in.cancel(stream, first), CancelOutcome::cancelled);
  EXPECT_EQ(client.integer({"EXISTS", stream + ":tenant:a"}), 0) << "its emptied backlog is gone";
  EXPECT_EQ(client.integer({"LLEN", stream + ":tenant:a:p:high"}), 1);
  const auto record = in.record(stream, first);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->state, TaskRecord::State::cancelled);
  EXPECT_FALSE(in.task(stream, first));
  EXPECT_EQ(in.cancel(stream, first), CancelOutcome::missing);
  EXPECT_EQ(in.tenants(stream).size(), 1U);
  EXPECT_EQ(in.cancel(stream, second), CancelOutcome::cancelled);
  EXPECT_TRUE(tenant_keys().empty()) << ::testing::PrintToString(tenant_keys());
  EXPECT_TRUE(in.tenants(stream).empty());
  EXPECT_TRUE(in.tasks(stream, {.state = TaskState::backlog}).tasks.empty());
  // Its tasks after a resume run as any.
  in.resume_tenant(stream, "a");
  p.enqueue("work", "{}", {.tenant = "a"});
  std::atomic<int> runs{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++runs; }); });
  EXPECT_TRUE(wait_until([&] { return runs == 1; }, 10s));
}

// The stats count the tasks waiting in the backlogs, and the tenants that have one; beyond
// 1,000 such tenants the count is left unknown, not guessed.
TEST_F(TenantsTest, StatsCountTheTasksWaitingInTheBacklogs) {
  Producer p = big_producer();
  enqueue_for(p, "a", 7);
  p.enqueue("work", "{}", {.priority = Priority::high, .tenant = "b"});
  p.enqueue("work", "{}", {.priority = Priority::low, .tenant = "c"});
  p.enqueue("work", "{}");
  Inspector in = inspector();
  QueueStats st = in.stats(stream);
  EXPECT_EQ(st.backlog, 9);
  EXPECT_EQ(st.backlog_tenants, 3);
  EXPECT_EQ(st.length, 1) << "a backlog's tasks are in no stream yet";
  const auto json = nlohmann::json::parse(st.to_json());
  EXPECT_EQ(json["backlog"], 9);
  EXPECT_EQ(json["backlog_tenants"], 3);
  StatsReader reader({.connection = {.url = server.url()}, .stream = stream});
  EXPECT_EQ(reader.read().backlog, 9);
  EXPECT_EQ(StatsReader({.connection = {.url = server.url()}, .stream = stream + "-none"}).read().backlog, 0);

  std::vector<TaskSpec> many;
  for (int i = 0; i < 1000; ++i) many.push_back({"work", "{}", {.tenant = "many-" + std::to_string(i)}});
  p.enqueue_batch(many);
  st = in.stats(stream);
  EXPECT_FALSE(st.backlog);
  EXPECT_EQ(st.backlog_tenants, 1003);
  EXPECT_TRUE(nlohmann::json::parse(st.to_json())["backlog"].is_null());
}

TEST_F(TenantsTest, BadTenantSettingsAreConfigErrors) {
  Inspector in = inspector();
  EXPECT_THROW(in.set_tenant(stream, "a", {.weight = 0}), ConfigError);
  EXPECT_THROW(in.set_tenant(stream, "a", {.concurrency = -1}), ConfigError);
  EXPECT_THROW(in.set_tenant(stream, "a", {.rate_limit = 1}), ConfigError);
  EXPECT_THROW(in.set_tenant(stream, "a", {.rate_limit = 1, .rate_per = 0ms}), ConfigError);
  EXPECT_THROW(in.set_tenant(stream, "", {.weight = 1}), ConfigError);
  EXPECT_THROW(in.set_tenant_defaults(stream, {.max_len = -1}), ConfigError);
  EXPECT_EQ(client.integer({"EXISTS", stream + ":tenants:config:a", stream + ":tenants:defaults"}), 0);
}

TEST_F(TenantsTest, ATenantNameIsCheckedBeforeAnythingIsWritten) {
  Producer p = producer();
  EXPECT_THROW(p.enqueue("work", "{}", {.tenant = std::string(257, 'x')}), ConfigError);
  EXPECT_THROW(p.enqueue("work", "{}", {.tenant = std::string("a\0b", 3)}), ConfigError);
  EXPECT_THROW(p.enqueue("work", "{}", {.extra_fields = {{"streamq_tenant", "a"}}}), ConfigError);
  EXPECT_TRUE(tenant_keys().empty());
}

}  // namespace
}  // namespace streamq::test
