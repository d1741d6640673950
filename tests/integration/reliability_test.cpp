// SPDX-License-Identifier: MIT
// Fault injection, the crash cases of README.md's "Delivery contract": worker
// processes killed with SIGKILL, a task that kills its worker, Redis killed mid-flow.
// Oracle: every task whose enqueue returned is done or dead-lettered; nothing unexpected ran;
// duplicates are counted and bounded.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

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

TEST(Reliability, SigtermFinishesRunningTasksAndExitsCleanly) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  std::vector<TaskSpec> batch(20, TaskSpec{"work", R"({"ms":300})"});
  producer.enqueue_batch(batch);
  WorkerProcess worker({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0", "concurrency=2", "prefetch=8"});
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) >= 2; }));
  const int status = worker.signal_and_wait(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // Everything it ran was acknowledged before it exited ...
  const auto done_after_stop = client.integer({"HLEN", stream + ":done"});
  EXPECT_EQ(client.integer({"XLEN", stream}), 20 - done_after_stop);
  // ... and every entry it held unstarted was released (idle set far in the past).
  for (const auto& [id, owner_idle] : pending_entries(client, stream)) {
    EXPECT_GT(owner_idle.second, 1'000'000'000) << id << " of " << owner_idle.first << " was not released";
  }
  // So a worker under another name takes them at once, although its claim_min_idle is ten
  // minutes: this wait is far shorter.
  WorkerProcess other(
      {STREAMQ_TEST_WORKER, server.url(), stream, "slot-1", "min_idle_ms=600000", "heartbeat_ms=200000"});
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"HLEN", stream + ":done"}) == 20 && client.integer({"XLEN", stream}) == 0 &&
               pending(client, stream) == 0;
      },
      60s));
}

TEST(Reliability, SecondSigtermEndsTheGracePeriodAtOnce) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string log = server.dir() + "/worker.log";
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  producer.enqueue("hang", R"({"ms":600000})");
  WorkerProcess worker({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0", "grace_ms=600000"}, log);
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":started"}) == 1; }));
  worker.signal(SIGTERM);
  // The first signal must have been taken before the second is sent (two pending SIGTERMs
  // would merge into one).
  ASSERT_TRUE(wait_until([&] { return slurp(log).find("stop signal") != std::string::npos; }));
  EXPECT_EQ(worker.wait_exit(500ms), -1) << "exited before the grace period was cut short";
  worker.signal(SIGTERM);
  const int status = worker.wait_exit(20s);  // the grace period is ten minutes
  ASSERT_NE(status, -1) << "the second SIGTERM did not end the grace period";
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The task that was still running keeps its entry: pending under the worker's name, not
  // released, so nobody else starts it before claim_min_idle.
  const auto entries = pending_entries(client, stream);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries.begin()->second.first, "slot-0");
  EXPECT_LT(entries.begin()->second.second, 600000);
  EXPECT_EQ(client.integer({"HLEN", stream + ":done"}), 0);
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

/// The run token of a consumer name's value "<client id> <token> <ms written>".
std::string run_token(std::string_view value) {
  const std::size_t from = value.find(' ') + 1;
  return std::string(value.substr(from, value.find(' ', from) - from));
}

// Two processes, one consumer name: while a consumer runs, it holds its name in
// <stream>:live:<group length>:<group>:<name> with its client id. A second live process with
// the same name is refused (ConfigError: streamq_test_worker exits with status 3), and a
// clean stop frees the name.
TEST(Reliability, ASecondLiveProcessWithTheSameConsumerNameIsRefused) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string key = detail::live_key(stream, "workers", "slot-0");
  WorkerProcess first({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0"});
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", key}) == 1; }));
  const std::string held_by(client.cmd({"GET", key}).view().str());
  const std::string log = server.dir() + "/second.log";
  WorkerProcess second({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0"}, log);
  const int status = second.wait_exit(10s);
  ASSERT_TRUE(WIFEXITED(status)) << "still running, or killed by a signal: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(slurp(log).find("consumer_name \"slot-0\" (group workers of " + stream +
                            ") is in use by a live process (client "),
            std::string::npos)
      << slurp(log);
  // The client id may change (the renewals come from the scheduler's connection), and the time
  // of the write does; the token of the first process's run must not.
  EXPECT_EQ(run_token(client.cmd({"GET", key}).view().str()), run_token(held_by))
      << "the refused process took the name";
  // The first goes on, and another name runs beside it.
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string one = producer.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":done").count(one) == 1; }));
  ConsumerOptions o{.connection = {.url = server.url()}, .stream = stream, .consumer_name = "slot-1"};
  o.stop_on_signals = false;
  {
    RunningConsumer other(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
    const std::string other_key = detail::live_key(stream, "workers", "slot-1");
    ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", other_key}) == 1; }));
    other.stop();
    EXPECT_EQ(client.integer({"EXISTS", other_key}), 0) << "a clean stop frees the name";
  }
  // The same name on another queue is another consumer.
  o.consumer_name = "slot-0";
  o.stream = stream + "-other";
  RunningConsumer elsewhere(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
  ASSERT_TRUE(wait_until([&] {
    return client.integer({"EXISTS", detail::live_key(o.stream, "workers", "slot-0")}) == 1;
  }));
  EXPECT_FALSE(elsewhere.finished());
}

// A restart after a crash still works at once: the holder's connection is gone, so the new
// process takes the name, and replays its own pending entry long before claim_min_idle.
TEST(Reliability, ARestartAfterAKillTakesTheConsumerNameAtOnce) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string key = detail::live_key(stream, "workers", "slot-0");
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string held = producer.enqueue("hang", nlohmann::json{{"ms", 600000}});
  const std::vector<std::string> args{STREAMQ_TEST_WORKER,  server.url(),         stream, "slot-0",
                                      "min_idle_ms=600000", "heartbeat_ms=200000"};
  WorkerProcess first(args);
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":started").count(held) == 1; }));
  const std::string before(client.cmd({"GET", key}).view().str());
  first.kill9();
  const std::string log = server.dir() + "/again.log";
  WorkerProcess again(args, log);
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":started").at(held) == 2; }, 10s))
      << "the restart did not run its own pending entry: " << slurp(log);
  const std::string after(client.cmd({"GET", key}).view().str());
  EXPECT_NE(run_token(after), run_token(before)) << "another run's token";
  EXPECT_NE(slurp(log).find("is gone; taking it over"), std::string::npos) << slurp(log);
  EXPECT_FALSE(again.died());
}

// A holder stopped (SIGSTOP) for longer than claim_min_idle cannot renew its name: it expires,
// and a new process under it runs. When the old one goes on, its next renewal finds the name
// taken: it stops, and run() throws ConfigError (status 3), so the two never share the name.
TEST(Reliability, AConsumerWhoseNameWasTakenWhileItWasStoppedStops) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string key = detail::live_key(stream, "workers", "slot-0");
  const std::string log = server.dir() + "/zombie.log";
  WorkerProcess zombie({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0", "min_idle_ms=1000",
                        "heartbeat_ms=200", "reclaim_ms=200"},
                       log);
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", key}) == 1; }));
  zombie.signal(SIGSTOP);
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"EXISTS", key}) == 0;
      },
      5s))
      << "the name did not expire";
  // The successor's own name lasts 10 s unrenewed: a slow moment of this machine (a sanitizer
  // build) must not let the old process take it back. Only the old one's 1 s had to expire.
  ConsumerOptions o{.connection = {.url = server.url()},
                    .stream = stream,
                    .consumer_name = "slot-0",
                    .claim_min_idle = 10s,
                    .reclaim_interval = 1s,
                    .heartbeat_interval = 1s,
                    .stop_on_signals = false};
  std::atomic<int> done{0};
  RunningConsumer successor(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++done; }); });
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", key}) == 1; }));
  const std::string holder(client.cmd({"GET", key}).view().str());
  zombie.signal(SIGCONT);
  const int status = zombie.wait_exit(10s);
  ASSERT_TRUE(WIFEXITED(status)) << "still running, or killed by a signal: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(slurp(log).find("was taken by another process (client "), std::string::npos) << slurp(log);
  const std::string now_held(client.cmd({"GET", key}).view().str());
  EXPECT_EQ(run_token(now_held), run_token(holder))
      << "the old process's stop freed or took the new one's name";
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  producer.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return done.load() == 1; }));
  EXPECT_FALSE(successor.finished());
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
    // consumer's first start on a full server cannot create them; see the README.)
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

// Wrong clocks: a producer and workers whose wall clocks are an hour off (libfaketime, from
// Debian's faketime package, which the test command installs; the monotonic clock is left alone,
// as a wrong wall clock leaves it). Due times, leases and reclaim follow the server's clock (TIME
// in the scripts, idle times of the pending list), so nothing runs early, nothing waits an hour,
// and a live worker's task is not taken from it.
TEST(Reliability, ClientClocksAnHourOffChangeNoTiming) {
  const std::string libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
  ASSERT_EQ(access(libfaketime.c_str(), R_OK), 0)
      << "libfaketime missing (scripts/install-deps.sh --test installs it)";
  const char* env_asan = std::getenv("ASAN_OPTIONS");
  const std::string asan_options = env_asan != nullptr ? env_asan : "";
  // The process itself under env (which execs it, so a kill reaches it), its clock `offset` off.
  const auto off = [&](const char* offset, std::vector<std::string> args) {
    std::vector<std::string> all{"/usr/bin/env", "LD_PRELOAD=" + libfaketime,
                                 std::string("FAKETIME=") + offset, "FAKETIME_DONT_FAKE_MONOTONIC=1",
                                 // Under ASan the preloaded library comes before ASan's runtime.
                                 "ASAN_OPTIONS=verify_asan_link_order=0:" + asan_options,
                                 STREAMQ_TEST_WORKER};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  };
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const auto server_ms = [&] {
    const detail::Reply r = client.cmd({"TIME"});
    const auto v = r.view().check();
    return v[0].as_int() * 1000 + v[1].as_int() / 1000;
  };
  // Producers an hour ahead and an hour behind: both tasks are due 2 s after the server's now.
  const std::int64_t before = server_ms();
  for (const char* offset : {"+1h", "-1h"}) {
    WorkerProcess producer(off(offset, {server.url(), stream, "enqueue", "work", "{}", "2000"}));
    ASSERT_EQ(producer.wait_exit(10s), 0) << offset;
  }
  const std::int64_t after = server_ms();
  const detail::Reply due = client.cmd({"ZRANGE", stream + ":delayed", "0", "-1", "WITHSCORES"});
  ASSERT_EQ(due.view().check().size(), 4u);
  for (std::size_t i = 1; i < 4; i += 2) {
    const auto score = static_cast<std::int64_t>(std::stod(std::string(due.view()[i].str())));
    EXPECT_GE(score, before + 2000);
    EXPECT_LE(score, after + 2000);
  }

  // A worker an hour ahead forwards them when they are due by the server's clock, not at once.
  WorkerProcess ahead(
      off("+1h", {server.url(), stream, "ahead", "min_idle_ms=1000", "heartbeat_ms=200", "reclaim_ms=200"}));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::max<std::int64_t>(0, before + 1500 - server_ms())));
  EXPECT_EQ(client.integer({"HLEN", stream + ":done"}), 0) << "run before they were due";
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"HLEN", stream + ":done"}) == 2;
      },
      15s))
      << "not run when due";

  // A task the worker an hour ahead holds (and keeps alive) is not reclaimed by one an hour
  // behind; once the first is killed, the second takes it after claim_min_idle of server time.
  const std::string held = Producer({.connection = {.url = server.url()}, .stream = stream})
                               .enqueue("hang", nlohmann::json{{"ms", 60000}});
  const auto started = [&] {
    const auto h = hash(client, stream + ":started");
    return h.count(held) != 0 ? h.at(held) : 0;
  };
  ASSERT_TRUE(wait_until([&] { return started() == 1; }));
  WorkerProcess behind(
      off("-1h", {server.url(), stream, "behind", "min_idle_ms=1000", "heartbeat_ms=200", "reclaim_ms=200"}));
  EXPECT_FALSE(wait_until([&] { return started() > 1; }, 3s)) << "a live worker's task was reclaimed";
  ahead.kill9();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_until([&] { return started() == 2; }, 15s)) << "the dead worker's task was not reclaimed";
  // Idle counts from the last heartbeat, due every 200 ms before the kill (later on a loaded
  // machine): not long before claim_min_idle after it, and not an hour off either way.
  EXPECT_GE(std::chrono::steady_clock::now() - killed, 400ms) << "reclaimed before claim_min_idle";
}

}  // namespace
}  // namespace streamq::test
