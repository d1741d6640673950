// SPDX-License-Identifier: MIT
// Worker processes killed with SIGKILL at random under a queue (plain tasks, tasks that fail
// once, delayed tasks coming due, retries waiting out their backoff), a task that kills its
// worker, a worker killed after its running entry was deleted, a worker stopped (SIGSTOP) longer
// than claim_min_idle. Every task whose enqueue returned is done or dead-lettered, nothing
// unexpected runs, and duplicates stay within what the victims held.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "redis_server.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST(Reliability, WorkersKilledAtRandomLoseNothing) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  std::vector<TaskSpec> batch(5000, TaskSpec{"work", R"({"ms":3})"});
  const auto ids = producer.enqueue_batch(batch);
  EXPECT_GT(run_chaos(server, client, stream, ids, 4, 8, 25, 150ms), 5);
}

TEST(Reliability, RetriesUnderKillsLeaveEachTaskInExactlyOnePlace) {
  // Every task fails once, so each goes through the retry script (copy + ack of the
  // original in one step) while workers are killed at random. Afterwards every task is done,
  // none is dead-lettered, and no original or copy is left behind in the stream or the PEL.
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  std::vector<TaskSpec> batch(2000, TaskSpec{"fail_once", R"({"ms":2})"});
  const auto ids = producer.enqueue_batch(batch);
  EXPECT_GT(run_chaos(server, client, stream, ids, 3, 8, 20, 100ms), 5);
}

/// Entries ever added to `stream` (Redis >= 7.0 reports it; -1 before).
std::int64_t entries_added(Client& c, const std::string& stream) {
  if (!c.redis_at_least(7, 0)) return -1;
  const detail::Reply r = c.cmd({"XINFO", "STREAM", stream});
  return r.view().check().field("entries-added").as_int();
}

TEST(Reliability, DelayedTasksForwardedWhileWorkersAreKilledRunAndAreForwardedOnce) {
  // Tasks come due over ~2 s while workers (each forwarding) are killed at random: every task
  // runs, and each reached the stream exactly once (entries-added counts every XADD).
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  std::vector<TaskSpec> batch;
  const auto start = std::chrono::system_clock::now() + 1s;
  for (int i = 0; i < 3000; ++i) {
    batch.push_back({.task_type = "work", .payload = "{}", .options = {.run_at = start + i * 700us}});
  }
  const auto ids = producer.enqueue_batch(batch);
  // A task already due when its chunk is written goes to the stream at once (a loaded machine
  // can take that long over the batch): every task is in one of the two.
  const std::int64_t delayed = client.integer({"ZCARD", stream + ":delayed"});
  ASSERT_EQ(delayed + client.integer({"XLEN", stream}), 3000);
  ASSERT_GT(delayed, 0);
  EXPECT_GT(run_chaos(server, client, stream, ids, 3, 8, 20, 120ms), 5);
  if (const std::int64_t added = entries_added(client, stream); added >= 0) {
    EXPECT_EQ(added, 3000);
  }
}

TEST(Reliability, RetriesWaitingOutTheirBackoffSurviveWorkerKills) {
  // Every task fails once and its retry waits 0-300 ms in the delayed set, while workers are
  // killed between failures and due times: each task ends done once more, nothing is left in
  // the delayed set, and each task reached the stream twice (the original and one retry).
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  // Enough work that more than 5 kills land mid-run (the harness stops killing once all is
  // done): 1,500 tasks once finished within 5 kills (600 ms) on Valkey 8 in CI.
  std::vector<TaskSpec> batch(3000, TaskSpec{"fail_once", R"({"ms":1})"});
  const auto ids = producer.enqueue_batch(batch);
  EXPECT_GT(
      run_chaos(server, client, stream, ids, 3, 8, 20, 100ms, {"backoff_base_ms=300", "backoff_cap_ms=300"}),
      5);
  // The retry copy and the removal of the original are one script, so a kill before it
  // repeats the failed attempt (which then writes the one copy) and a kill after it does not
  // touch the copy: exactly one copy per task, whatever was killed when.
  if (const std::int64_t added = entries_added(client, stream); added >= 0) {
    EXPECT_EQ(added, 2 * static_cast<std::int64_t>(ids.size()));
  }
}

TEST(Reliability, TaskThatKillsItsWorkerIsDeadLetteredAfterTheLimit) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  std::vector<TaskSpec> batch(200, TaskSpec{"work", "{}"});
  const std::string poison = producer.enqueue("crash", "{}");
  producer.enqueue_batch(batch);

  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(std::make_unique<WorkerProcess>(std::vector<std::string>{
        STREAMQ_TEST_WORKER, server.url(), stream, "slot-" + std::to_string(i), "max_deliveries=3",
        "min_idle_ms=600", "heartbeat_ms=150", "reclaim_ms=100"}));
  }
  int deaths = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& w : workers) {
          if (w->died()) {  // a supervisor restarts crashed workers under the same name
            ++deaths;
            w->start();
          }
        }
        return client.integer({"XLEN", stream + ":dlq"}) == 1 &&
               client.integer({"HLEN", stream + ":done"}) == 200 && pending(client, stream) == 0;
      },
      60s));
  const auto dead = client.xrange(stream + ":dlq").at(0).second;
  EXPECT_EQ(Client::get(dead, "task_id"), poison);
  EXPECT_EQ(Client::get(dead, "reason"), "max_deliveries");
  // Started three times (each start counted before the handler ran), then dead-lettered by
  // the reclaimer without a fourth run; each start killed one worker.
  const auto attempts = hash(client, stream + ":attempts");
  EXPECT_EQ(attempts.at(poison), 3);
  EXPECT_TRUE(wait_until([&] {
    for (auto& w : workers) {
      if (w->died()) {
        ++deaths;
        w->start();
      }
    }
    return deaths >= 3;
  }));
  EXPECT_EQ(deaths, 3);
}

// A worker killed while it ran five tasks is restarted under its name: it resumes all five at
// once, with its full concurrency, not one after another.
TEST(Reliability, ARestartedWorkerResumesItsOwnWorkWithItsFullConcurrency) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  std::vector<TaskSpec> batch(5, TaskSpec{"limited", R"({"ms":1500})"});
  producer.enqueue_batch(batch);
  // (limited: its handlers record how many run at once; a limit of 100 never holds one back.)
  const std::vector<std::string> args{STREAMQ_TEST_WORKER, server.url(), stream,     "w0",
                                      "concurrency=5",     "prefetch=5", "limit=100"};
  WorkerProcess first(args);
  const std::string running = stream + ":now-running";
  ASSERT_TRUE(wait_until([&] { return client.integer({"SCARD", running}) == 5; }, 20s));
  first.kill9();
  client.cmd({"DEL", running});
  client.cmd({"SET", stream + ":most", "0"});
  WorkerProcess again(args);  // the same name: it replays its own pending entries at once
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) == 5; }, 30s));
  EXPECT_EQ(std::string(client.cmd({"GET", stream + ":most"}).view().str()), "5");
  again.signal_and_wait(SIGTERM);
}

// A frozen worker (SIGSTOP: its connection stays open) is not gone, but the status tells the
// truth: Inspector::task of the task it holds says, once it has been silent for a third of its
// lease, that its holder no longer renews its lease and when the entry will be reclaimed.
TEST(Reliability, TheStatusOfATaskWhoseWorkerIsFrozenSaysItsHolderIsSilent) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string id = producer.enqueue("hang", R"({"ms":60000})");
  WorkerProcess worker(
      {STREAMQ_TEST_WORKER, server.url(), stream, "w0", "min_idle_ms=6000", "heartbeat_ms=300"});
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":started"}) == 1; }, 20s));
  Inspector in({.connection = {.url = server.url()}});
  std::optional<TaskInfo> t = in.task(stream, id);
  ASSERT_TRUE(t && t->holder);
  EXPECT_EQ(t->state, TaskState::pending);
  EXPECT_TRUE(t->holder->renewing);
  EXPECT_GT(t->holder->lease_ms, 5000);
  EXPECT_LE(t->holder->lease_ms, 6001);  // (from whole milliseconds: one may come of the rounding)
  worker.signal(SIGSTOP);
  ASSERT_TRUE(wait_until(
      [&] {
        t = in.task(stream, id);
        return t && t->holder && !t->holder->renewing;
      },
      10s));
  EXPECT_GE(t->holder->silent_ms, 2000);
  EXPECT_FALSE(t->holder->gone) << "its connection is open";
  // Its entry's lease was renewed with its name (one heartbeat apart at most): reclaimed about
  // a lease after the holder went silent.
  EXPECT_GT(t->holder->reclaim_in_ms, 0);
  EXPECT_LT(t->holder->reclaim_in_ms, t->holder->lease_ms - t->holder->silent_ms + 1000);
  EXPECT_NE(t->to_json().find("\"renewing\":false"), std::string::npos) << t->to_json();
}

// A worker killed with -9 is gone the moment its connection closes: Inspector::task says so at
// once (its name's holder is no longer connected, the check a restarted worker makes to take
// its name over), not only once the holder has been silent for a third of its lease (20 s here).
TEST(Reliability, TheStatusOfATaskWhoseWorkerWasKilledSaysAtOnceThatItsHolderIsGone) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string id = producer.enqueue("hang", R"({"ms":600000})");
  WorkerProcess worker(
      {STREAMQ_TEST_WORKER, server.url(), stream, "w0", "min_idle_ms=60000", "heartbeat_ms=300"});
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":started"}) == 1; }, 20s));
  Inspector in({.connection = {.url = server.url()}});
  std::optional<TaskInfo> t = in.task(stream, id);
  ASSERT_TRUE(t && t->holder);
  EXPECT_TRUE(t->holder->renewing);
  EXPECT_FALSE(t->holder->gone);
  worker.kill9();
  // (The server closes the killed process's connection within moments; its lease would make it
  // silent only after 20 s.)
  ASSERT_TRUE(wait_until(
      [&] {
        t = in.task(stream, id);
        return t && t->holder && t->holder->gone;
      },
      3s))
      << (t ? t->to_json() : std::string("no task"));
  EXPECT_FALSE(t->holder->renewing);
  EXPECT_LT(t->holder->silent_ms, 20000);
  EXPECT_NE(t->to_json().find("\"gone\":true"), std::string::npos) << t->to_json();
}

TEST(Reliability, WorkerKilledAfterItsRunningEntryWasDeletedLeavesTheCopyItRead) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string task_id =
      producer.enqueue("hang", R"({"ms":600000})", {.extra_fields = {{"order", "42"}}});
  WorkerProcess worker(
      {STREAMQ_TEST_WORKER, server.url(), stream, "slot-0", "heartbeat_ms=200", "min_idle_ms=1000"});
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":started"}) == 1; }));
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  client.cmd({"XDEL", stream, entries[0].first}).view().check();
  // The worker's lease pass finds the body gone and moves the fields it read to the
  // dead-letter stream, off the pending list ...
  ASSERT_TRUE(wait_until([&] {
    return client.integer({"XLEN", stream + ":dlq"}) == 1 && pending(client, stream) == 0;
  }));
  worker.kill9();
  // ... so when it dies mid-task, that record is where the task is, with all its fields, and
  // nothing else refers to it.
  const auto dead = client.xrange(stream + ":dlq");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(Client::get(dead[0].second, "task_id"), task_id);
  EXPECT_EQ(Client::get(dead[0].second, "order"), "42");
  EXPECT_EQ(Client::get(dead[0].second, "payload"), R"({"ms":600000})");
  EXPECT_EQ(Client::get(dead[0].second, "reason"), "body_lost");
  EXPECT_EQ(Client::get(dead[0].second, "original_id"), entries[0].first);
  EXPECT_EQ(client.integer({"XLEN", stream}), 0);
  EXPECT_EQ(pending(client, stream), 0);
}

// A zombie worker: a worker process SIGSTOPped longer than claim_min_idle while it runs a
// task. Another worker reclaims and finishes it (and what the stopped one had prefetched); when
// the zombie wakes, its handler ends (a second run: the documented at-least-once) but its
// completion is dropped by the owner check, so nothing is left, retried, dead-lettered or lost.
TEST(Reliability, AStoppedWorkersTasksAreReclaimedAndItsLateCompletionsChangeNothing) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string held = producer.enqueue("hang", nlohmann::json{{"ms", 1500}});
  std::vector<std::string> ids{held};
  for (int i = 0; i < 20; ++i) ids.push_back(producer.enqueue("work", nlohmann::json{{"ms", 20}}));
  const std::vector<std::string> opts{"min_idle_ms=1000", "heartbeat_ms=200", "reclaim_ms=200", "prefetch=8"};
  std::vector<std::string> zombie_args{STREAMQ_TEST_WORKER, server.url(), stream, "zombie"};
  zombie_args.insert(zombie_args.end(), opts.begin(), opts.end());
  WorkerProcess zombie(zombie_args);
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":started").count(held) == 1; }));
  zombie.signal(SIGSTOP);
  std::vector<std::string> live_args{STREAMQ_TEST_WORKER, server.url(), stream, "live"};
  live_args.insert(live_args.end(), opts.begin(), opts.end());
  WorkerProcess live(live_args);
  ASSERT_TRUE(wait_until(
      [&] {
        const auto done = hash(client, stream + ":done");
        return done.size() == ids.size();
      },
      30s))
      << "the stopped worker's tasks were not taken over";
  EXPECT_EQ(hash(client, stream + ":started").at(held), 2) << "reclaimed once";
  zombie.signal(SIGCONT);
  // The zombie's handler finishes its sleep and records a second run; its completion must not
  // write anything.
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":done").at(held) == 2; }, 10s));
  std::this_thread::sleep_for(500ms);  // its completer's turn: ack, delete (dropped)
  EXPECT_EQ(client.integer({"XLEN", stream}), 0);
  EXPECT_EQ(client.integer({"XLEN", stream + ":dlq"}), 0);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0);
  EXPECT_EQ(pending(client, stream), 0);
  const auto done = hash(client, stream + ":done");
  std::int64_t runs = 0;
  for (const auto& id : ids) {
    EXPECT_TRUE(done.count(id)) << "lost task " << id;
    runs += done.count(id) != 0 ? done.at(id) : 0;
  }
  // Runs beyond one each: the held task's second run, and at most what the zombie had in hand.
  EXPECT_LE(runs - static_cast<std::int64_t>(ids.size()), 1 + 8);
}

}  // namespace
}  // namespace streamq::test
