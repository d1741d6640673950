// SPDX-License-Identifier: MIT
// Tracked tasks under kill -9: a worker killed mid-task leaves its record running until another
// reclaims the task, and the records always agree with where their tasks really are (a
// checker over the streams, the pending lists, the delayed set and the dead letters).
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "redis_server.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using State = TaskRecord::State;

/// Where each task of `queue` is now, by task id (the Inspector's pages of every state). A task
/// found in two places is reported there too (`twice`).
std::map<std::string, TaskState> whereabouts(Inspector& in, const std::string& queue,
                                             std::set<std::string>& twice) {
  std::map<std::string, TaskState> where;
  for (const TaskState s :
       {TaskState::pending, TaskState::queued, TaskState::backlog, TaskState::delayed, TaskState::dead}) {
    TaskQuery q{.state = s, .count = 1000};
    for (;;) {
      const TaskPage page = in.tasks(queue, q);
      for (const TaskInfo& t : page.tasks) {
        // (A queued listing also holds what the group has delivered: the pending one counts.)
        const auto [it, added] = where.emplace(std::string(t.task_id()), s);
        if (!added && !(it->second == TaskState::pending && s == TaskState::queued)) twice.insert(it->first);
      }
      if (page.next_cursor.empty()) break;
      q.cursor = page.next_cursor;
    }
  }
  return where;
}

/// How many of `ids` have a record that disagrees with where the task is: pending (delivered)
/// means queued, retrying or running; in a stream undelivered or in its tenant's backlog, queued
/// or retrying; delayed,
/// delayed or retrying; a dead letter, dead; nowhere, done. Prints each disagreement.
int disagreements(Inspector& in, const std::string& queue, const std::vector<std::string>& ids) {
  std::set<std::string> twice;
  const auto where = whereabouts(in, queue, twice);
  int bad = 0;
  std::map<std::string, int> states;  // what the check saw, printed
  for (const std::string& id : ids) {
    const auto r = in.record(queue, id);
    ++states[r ? std::string(to_string(r->state)) : "missing"];
    const auto w = where.find(id);
    bool ok = r.has_value() && twice.count(id) == 0;
    if (ok) {
      const State s = r->state;
      if (w == where.end()) {
        ok = s == State::done;
      } else {
        switch (w->second) {
          case TaskState::pending:
            ok = s == State::queued || s == State::retrying || s == State::running;
            break;
          case TaskState::queued:
          case TaskState::backlog: ok = s == State::queued || s == State::retrying; break;
          case TaskState::delayed: ok = s == State::delayed || s == State::retrying; break;
          case TaskState::dead: ok = s == State::dead; break;
        }
      }
    }
    if (!ok) {
      ++bad;
      ADD_FAILURE() << "task " << id << ": record " << (r ? to_string(r->state) : "missing") << ", task "
                    << (w == where.end() ? "nowhere" : std::string(to_string(w->second)))
                    << (twice.count(id) ? " (and in two places)" : "");
    }
  }
  std::printf("[ records  ]");
  for (const auto& [state, n] : states) std::printf(" %s=%d", state.c_str(), n);
  std::printf(", %d disagree\n", bad);
  return bad;
}

std::vector<std::string> worker_args(const RedisServer& server, const std::string& stream,
                                     const std::string& name, std::vector<std::string> more = {}) {
  std::vector<std::string> args{STREAMQ_TEST_WORKER, server.url(), stream, name};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

/// What each chaos test starts with: a server of its own, a raw client, its stream and an
/// Inspector.
class ChaosTest : public ::testing::Test {
 protected:
  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();
  Inspector in{InspectorOptions{.connection = {.url = server.url()}}};

  /// A producer of tracked tasks (kept ten minutes once done), with room for every task.
  Producer tracked_producer(int partitions) const {
    return Producer({.connection = {.url = server.url()},
                     .stream = stream,
                     .max_len = 100000,
                     .partitions = partitions,
                     .retention = Retention{.done = std::chrono::minutes(10)}});
  }
  /// Enqueues `tasks` (each failing once: a retry, through the backoff's delayed set, so they go
  /// through every state while workers die); mid-run, once `done_before` are done, every worker
  /// is killed at once (what is left is frozen where it is) and the records are checked; then the
  /// chaos harness's kills until everything is done, and the check again.
  void records_agree_while_workers_are_killed(const std::vector<TaskSpec>& tasks, std::int64_t done_before) {
    Producer producer = tracked_producer(1);
    const auto ids = producer.enqueue_batch(tasks);
    const std::vector<std::string> backoff{"backoff_base_ms=5", "backoff_cap_ms=50"};
    {
      std::vector<std::unique_ptr<WorkerProcess>> procs;
      for (int i = 0; i < 3; ++i) {
        procs.push_back(std::make_unique<WorkerProcess>(
            worker_args(server, stream, "slot-" + std::to_string(i), backoff)));
      }
      ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) >= done_before; }, 30s));
      for (auto& p : procs) p->kill9();
    }
    EXPECT_EQ(disagreements(in, stream, ids), 0);
    run_chaos(server, client, stream, ids, 3, 8, 10, 150ms, backoff);
    EXPECT_EQ(disagreements(in, stream, ids), 0);
    int retried = 0;
    for (const std::string& id : ids) retried += in.record(stream, id)->attempts >= 2;
    EXPECT_EQ(retried, static_cast<int>(ids.size()));  // each failed once, then ran again
  }
};
class TrackingChaos : public ChaosTest {};
class FlowChaos : public ChaosTest {};

/// Three worker processes (slot-0..2) of `stream` with `more` arguments, one of them killed with
/// SIGKILL and started again every 150 ms, `kills` times (`between(k)` runs before kill k).
class KilledWorkers {
 public:
  KilledWorkers(const RedisServer& server, const std::string& stream, const std::vector<std::string>& more,
                unsigned seed)
      : rng_(seed) {
    for (int i = 0; i < 3; ++i) {
      procs_.push_back(
          std::make_unique<WorkerProcess>(worker_args(server, stream, "slot-" + std::to_string(i), more)));
    }
  }
  void kill(int kills, const std::function<void(int)>& between = {}) {
    for (int k = 0; k < kills; ++k) {
      std::this_thread::sleep_for(150ms);
      if (between) between(k);
      auto& w = procs_[rng_() % procs_.size()];
      w->kill9();
      w->start();
    }
  }

 private:
  std::vector<std::unique_ptr<WorkerProcess>> procs_;
  std::mt19937 rng_;
};

TEST_F(TrackingChaos, AWorkerKilledMidTaskLeavesItRunningUntilAnotherReclaimsIt) {
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string id = producer.enqueue("hang", R"({"ms":1000})", {.retention = Retention{.done = 10min}});
  WorkerProcess first(worker_args(server, stream, "slot-0", {"min_idle_ms=1500"}));
  ASSERT_TRUE(wait_until([&] { return client.integer({"HEXISTS", stream + ":started", id}) == 1; }));
  // The start is marked by the worker's completer, not on the handler's path: within its
  // linger (a few ms) of the handler's start.
  std::optional<TaskRecord> r;
  ASSERT_TRUE(wait_until([&] {
    r = in.record(stream, id);
    return r && r->state == State::running;
  }));
  EXPECT_EQ(r->worker, "slot-0");
  EXPECT_EQ(r->attempts, 1);
  first.kill9();
  // Dead, its task still pending on it: the record says what is known, running on slot-0.
  r = in.record(stream, id);
  EXPECT_EQ(r->state, State::running);
  EXPECT_EQ(r->worker, "slot-0");
  WorkerProcess second(worker_args(server, stream, "slot-1", {"min_idle_ms=1500"}));
  ASSERT_TRUE(wait_until([&] {
    const auto now = in.record(stream, id);
    return now && now->worker == "slot-1";
  }));
  EXPECT_EQ(in.record(stream, id)->attempts, 2);
  ASSERT_TRUE(wait_until([&] { return in.record(stream, id)->state == State::done; }));
  EXPECT_EQ(disagreements(in, stream, {id}), 0);
}

TEST_F(TrackingChaos, RecordsAgreeWithWhereTasksAreWhileWorkersAreKilled) {
  records_agree_while_workers_are_killed(std::vector<TaskSpec>(1500, TaskSpec{"fail_once", R"({"ms":2})"}),
                                         300);
}

// The same with every task in one of 12 tenants of concurrency 2: the tasks wait in their
// tenants' backlogs too, and hold their tenants' slots while workers die; no tenant's key is
// left.
TEST_F(TrackingChaos, RecordsAgreeWithWhereTenantsTasksAreWhileWorkersAreKilled) {
  in.set_tenant_defaults(stream, {.concurrency = 2});
  std::vector<TaskSpec> tasks;
  for (int i = 0; i < 1200; ++i) {
    tasks.push_back({"fail_once", R"({"ms":2})", {.tenant = "tenant-" + std::to_string(i % 12)}});
  }
  records_agree_while_workers_are_killed(tasks, 200);
  for (const char* pattern : {":tenant:*", ":tenants:slots:*", ":tenants:ready", ":tenants:waiting"}) {
    EXPECT_TRUE(wait_until(
        [&] {
          return client.cmd({"KEYS", stream + pattern}).view().size() == 0;
        },
        5s))
        << pattern << " left";
  }
}

/// `flows` chords of `children` "work" tasks (8 ms each) under a "gather" parent (the test
/// worker records how many children it read): every task's id, and the parents'.
struct Chords {
  std::vector<std::string> ids, parents;
};
Chords enqueue_chords(Producer& producer, int flows, int children) {
  Chords out;
  for (int f = 0; f < flows; ++f) {
    const FlowIds flow = producer.enqueue_flow(
        chord(std::vector<TaskSpec>(static_cast<std::size_t>(children), TaskSpec{"work", R"({"ms":8})"}),
              TaskSpec{"gather", "{}"}));
    out.parents.push_back(flow.task_id);
    out.ids.push_back(flow.task_id);
    for (const FlowIds& c : flow.children) out.ids.push_back(c.task_id);
  }
  return out;
}

/// Whether the record of each of `ids` (the i-th one in queue_of(i)) says done. A handler counts
/// its run in `:done` before the done script writes its record, and a worker killed between the
/// two leaves the record running until the task is reclaimed and run again.
bool all_done(Inspector& in, const std::vector<std::string>& ids,
              const std::function<std::string(std::size_t)>& queue_of) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto r = in.record(queue_of(i), ids[i]);
    if (!r || r->state != State::done) return false;
  }
  return true;
}

/// Each parent of `chords` released once (its 'released' events in `streams`, the queue's),
/// run once done, having read all its `children`.
void expect_each_parent_released_once(Inspector& in, Client& client, const std::string& queue,
                                      const std::vector<std::string>& streams, const Chords& chords,
                                      int children) {
  const auto read = hash(client, queue + ":children");
  std::map<std::string, int> released;
  for (const std::string& s : streams) {
    for (const QueueEvent& e : in.events(s, "", 10000).events) {
      if (e.event == "released") ++released[e.task_id];
    }
  }
  for (const std::string& p : chords.parents) {
    EXPECT_EQ(released[p], 1) << "parent " << p << " enqueued " << released[p] << " times";
    ASSERT_TRUE(read.count(p)) << "parent " << p << " never ran";
    EXPECT_EQ(read.at(p), children) << "parent " << p;
    EXPECT_EQ(in.record(queue, p)->state, State::done);
  }
}

TEST_F(FlowChaos, EveryParentIsEnqueuedOnceWithAllItsChildrenWhileWorkersAreKilled) {
  Producer producer = tracked_producer(1);
  // 40 chords of 25 children and one of 1,000: the kills land while children finish and
  // parents are released.
  const Chords chords = enqueue_chords(producer, 40, 25);
  const Chords fan_out = enqueue_chords(producer, 1, 1000);
  std::vector<std::string> ids = chords.ids;
  ids.insert(ids.end(), fan_out.ids.begin(), fan_out.ids.end());
  run_chaos(server, client, stream, ids, 3, 8, 14, 150ms);
  expect_each_parent_released_once(in, client, stream, {stream}, chords, 25);
  expect_each_parent_released_once(in, client, stream, {stream}, fan_out, 1000);
  EXPECT_EQ(disagreements(in, stream, ids), 0);
  EXPECT_EQ(client.cmd({"KEYS", stream + ":flow:*"}).view().size(), 0u);
}

TEST_F(FlowChaos, FlowsAcrossPartitionsReleaseEveryParentOnceWithAllItsChildrenWhileWorkersAreKilled) {
  constexpr int kPartitions = 3;
  Producer producer = tracked_producer(kPartitions);
  // 30 chords of 20 children, each child in the next partition in turn: most children's ends
  // go through an outbox and a courier while workers die.
  const Chords chords = enqueue_chords(producer, 30, 20);
  const std::vector<std::string>& ids = chords.ids;
  KilledWorkers workers(server, stream,
                        {"partitions=" + std::to_string(kPartitions), "concurrency=3", "max_deliveries=30"},
                        2027);
  workers.kill(8);
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":done").size() == ids.size(); }, 60s))
      << hash(client, stream + ":done").size() << " of " << ids.size();
  EXPECT_TRUE(wait_until([&] { return all_done(in, ids, [&](std::size_t) { return stream; }); }, 30s));
  std::vector<std::string> streams;
  for (int p = 0; p < kPartitions; ++p) streams.push_back(detail::partition_stream(stream, kPartitions, p));
  expect_each_parent_released_once(in, client, stream, streams, chords, 20);
  for (const std::string& id : ids) EXPECT_EQ(in.record(stream, id)->state, State::done) << id;
  EXPECT_TRUE(wait_until(
      [&] {
        std::int64_t left = 0;
        for (int p = 0; p < kPartitions; ++p) {
          const std::string part = detail::partition_stream(stream, kPartitions, p);
          left += client.integer({"XLEN", part + ":flows:outbox"}) +
                  client.integer({"HLEN", part + ":flows:placing"}) + client.integer({"XLEN", part + ":dlq"});
          left += static_cast<std::int64_t>(client.cmd({"KEYS", part + ":flow:*"}).view().size());
        }
        return left == 0;
      },
      10s))
      << "outbox entries, dead letters or flow keys left";
}

TEST_F(FlowChaos, FlowsAcrossQueuesReleaseEveryParentOnceWithAllItsChildrenWhileWorkersAreKilled) {
  Producer producer = tracked_producer(1);
  const std::string other = "other-" + stream;  // the children's other queue, of 2 partitions
  // 30 chords of 20 children, every other child in the other queue: their ends go through its
  // outboxes and its workers' couriers while the workers of both queues die.
  Chords chords;
  for (int f = 0; f < 30; ++f) {
    FlowNode gather{.task_type = "gather", .payload = "{}"};
    for (int c = 0; c < 20; ++c) {
      FlowNode child{.task_type = "work", .payload = R"({"ms":8})"};
      if (c % 2 == 1) child.queue = FlowQueue{.stream = other, .partitions = 2};
      gather.children.push_back(std::move(child));
    }
    const FlowIds flow = producer.enqueue_flow(gather);
    chords.parents.push_back(flow.task_id);
    chords.ids.push_back(flow.task_id);
    for (const FlowIds& c : flow.children) chords.ids.push_back(c.task_id);
  }
  KilledWorkers home(server, stream, {"concurrency=3", "max_deliveries=30"}, 2029);
  KilledWorkers away(server, other, {"partitions=2", "concurrency=3", "max_deliveries=30"}, 2030);
  home.kill(4, [&](int) { away.kill(1); });
  const auto done = [&] {
    return hash(client, stream + ":done").size() + hash(client, other + ":done").size();
  };
  ASSERT_TRUE(wait_until([&] { return done() == chords.ids.size(); }, 60s))
      << done() << " of " << chords.ids.size();
  const auto queue_of = [&](std::size_t i) {
    const bool elsewhere = i % 21 != 0 && (i % 21 - 1) % 2 == 1;  // (each flow: its parent, then 20 children)
    return elsewhere ? other : stream;
  };
  EXPECT_TRUE(wait_until([&] { return all_done(in, chords.ids, queue_of); }, 30s));
  expect_each_parent_released_once(in, client, stream, {stream}, chords, 20);
  for (std::size_t i = 0; i < chords.ids.size(); ++i) {
    const auto r = in.record(queue_of(i), chords.ids[i]);
    ASSERT_TRUE(r) << chords.ids[i];
    EXPECT_EQ(r->state, State::done) << chords.ids[i];
  }
  EXPECT_TRUE(wait_until(
      [&] {
        std::int64_t left = client.integer({"XLEN", stream + ":flows:outbox"}) +
                            client.integer({"HLEN", stream + ":flows:placing"}) +
                            static_cast<std::int64_t>(client.cmd({"KEYS", stream + ":flow:*"}).view().size());
        for (int p = 0; p < 2; ++p) {
          const std::string part = detail::partition_stream(other, 2, p);
          left += client.integer({"XLEN", part + ":flows:outbox"}) + client.integer({"XLEN", part + ":dlq"});
        }
        return left == 0;
      },
      10s))
      << "outbox entries, dead letters or flow keys left";
}

TEST_F(FlowChaos, EachFailurePolicyAndAReplayHoldWhileWorkersAreKilled) {
  Producer producer = tracked_producer(1);
  // 30 chords of 5 children that succeed and one that fails until it is replayed, with each
  // policy in turn for their failures; then every dead letter replayed, while workers die.
  const ChildFailure policies[] = {ChildFailure::fail_parent, ChildFailure::ignore, ChildFailure::remove};
  const int expected_read[] = {6, 6, 5};  // what each policy's parent reads, in the end
  std::vector<std::string> parents;
  for (int f = 0; f < 30; ++f) {
    // (Long enough for the kills to land while they run: about 1.5 s of work, 0.5 s replayed.)
    std::vector<TaskSpec> header(5, TaskSpec{"work", R"({"ms":40})"});
    header.push_back(TaskSpec{"fail_unreplayed", R"({"ms":100})", {.max_retries = 0}});
    parents.push_back(
        producer.enqueue_flow(chord(std::move(header), {"gather", "{}"}, policies[f % 3])).task_id);
  }
  KilledWorkers workers(server, stream, {"concurrency=2", "max_deliveries=30"}, 2028);
  workers.kill(6);
  // Every failing child dead (once), the parents of fail_parent dead, the others run.
  const auto settled = [&] {
    if (client.integer({"XLEN", stream + ":dlq"}) != 30) return false;
    for (int f = 0; f < 30; ++f) {
      const auto r = in.record(stream, parents[static_cast<std::size_t>(f)]);
      if (!r || r->state != (f % 3 == 0 ? State::dead : State::done)) return false;
    }
    return true;
  };
  ASSERT_TRUE(wait_until(settled, 60s));
  for (int f = 0; f < 30; f += 3)
    EXPECT_EQ(in.record(stream, parents[static_cast<std::size_t>(f)])->reason, "child_failed");
  EXPECT_EQ(in.replay(stream).done, 30);
  workers.kill(4);
  ASSERT_TRUE(wait_until(
      [&] {
        for (const std::string& p : parents) {
          if (in.record(stream, p)->state != State::done) return false;
        }
        return client.integer({"XLEN", stream + ":dlq"}) == 0;
      },
      60s));
  const auto read = hash(client, stream + ":children");
  std::map<std::string, int> released;
  for (const QueueEvent& e : in.events(stream, "", 10000).events) {
    if (e.event == "released") ++released[e.task_id];
  }
  for (int f = 0; f < 30; ++f) {
    const std::string& p = parents[static_cast<std::size_t>(f)];
    EXPECT_EQ(released[p], 1) << "parent " << p << " enqueued " << released[p] << " times";
    EXPECT_EQ(read.at(p), expected_read[f % 3]) << "parent " << p << " (policy " << f % 3 << ")";
  }
  EXPECT_TRUE(wait_until([&] { return client.cmd({"KEYS", stream + ":flow:*"}).view().size() == 0; }, 10s));
}

TEST_F(FlowChaos, ABatchGrowingWhileWorkersAreKilledFiresItsCallbackOnceAfterItsClose) {
  Producer producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  const std::string batch = producer.open_batch(
      {.on_complete =
           TaskSpec{"work",
                    "{}",
                    {.task_id = "on-complete", .retention = Retention{.done = std::chrono::minutes(10)}}},
       .on_success =
           TaskSpec{"work",
                    "{}",
                    {.task_id = "on-success", .retention = Retention{.done = std::chrono::minutes(10)}}}});
  // 600 members (each sleeps 4 ms), the last 300 added while the first run and workers die.
  std::vector<TaskSpec> half(300, TaskSpec{"work", R"({"ms":4})", {.batch = batch}});
  std::vector<std::string> ids = producer.enqueue_batch(half);
  KilledWorkers workers(server, stream, {"concurrency=2", "max_deliveries=20"}, 2026);
  workers.kill(8, [&](int kill) {
    if (kill != 2) return;
    const std::vector<std::string> added = producer.enqueue_batch(half);
    ids.insert(ids.end(), added.begin(), added.end());
    EXPECT_TRUE(producer.close_batch(batch));
  });
  ids.push_back("on-complete");
  ids.push_back("on-success");
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":done").size() == ids.size(); }, 60s))
      << hash(client, stream + ":done").size() << " of " << ids.size();
  const auto done = hash(client, stream + ":done");
  for (const std::string& id : ids) EXPECT_TRUE(done.count(id)) << "lost task " << id;
  const BatchInfo info = *in.batch(stream, batch);
  EXPECT_EQ(info.state, "fired");
  EXPECT_EQ(info.total, 600);
  EXPECT_EQ(info.done, 600);
  // Each callback enqueued once (its one 'enqueued' event; a kill may run it twice, not add it twice).
  int enqueued = 0;
  for (const QueueEvent& e : in.events(stream, "", 10000).events) {
    enqueued += e.event == "enqueued" && (e.task_id == "on-complete" || e.task_id == "on-success");
  }
  EXPECT_EQ(enqueued, 2);
}

}  // namespace
}  // namespace streamq::test
