// SPDX-License-Identifier: MIT
// Tracked tasks (EnqueueOptions::retention): the state record follows every change of a task
// (written by the script that makes the change), the events stream says each, results and
// progress reach the record, retention expires it, and untracked tasks cost nothing of this.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "gate.hpp"
#include "redis/scripts.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;
using State = TaskRecord::State;

class TrackingTest : public ConsumerTest {
 protected:
  Inspector inspector{InspectorOptions{.connection = {.url = server.url()}}};

  std::optional<TaskRecord> record(const std::string& id) { return inspector.record(stream, id); }
  State state_of(const std::string& id) {
    const auto r = record(id);
    return r ? r->state : static_cast<State>(-1);
  }
  /// The events of the queue so far: (event, task id).
  std::vector<std::pair<std::string, std::string>> events() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const QueueEvent& e : inspector.events(stream, "", 10000).events)
      out.emplace_back(e.event, e.task_id);
    return out;
  }
  std::vector<std::string> events_of(const std::string& id) {
    std::vector<std::string> out;
    for (const auto& [event, task] : events()) {
      if (task == id) out.push_back(event);
    }
    return out;
  }
};

TEST_F(TrackingTest, ARecordFollowsATaskFromEnqueueThroughProgressToItsResult) {
  const std::string id = producer().enqueue("work", R"({"n":7})", {.retention = Retention{.done = 1min}});
  auto r = record(id);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, State::queued);
  EXPECT_EQ(r->task_type, "work");
  EXPECT_EQ(r->attempts, 0);
  EXPECT_TRUE(r->enqueued_at);
  EXPECT_FALSE(r->started_at);
  Gate gate;
  std::atomic<bool> tracked{false}, reported{false};
  auto o = options();
  o.consumer_name = "w1";
  RunningConsumer rc(o, [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      tracked = t.tracked();
      reported = t.set_progress(50) && t.write_partial_result("half");
      gate.pass(t.entry_id());
      t.set_result(R"({"sum":14})");
    });
  });
  const auto release = gate.opens_on_exit();
  ASSERT_FALSE(gate.arrived().empty());
  EXPECT_TRUE(tracked);
  EXPECT_TRUE(reported);
  // The start and the reports are written by the completer, not on the handler's path: soon,
  // while the handler is still held at the gate.
  ASSERT_TRUE(wait_until([&] {
    r = record(id);
    return r && r->progress == "50" && r->result == "half";
  }));
  EXPECT_EQ(r->state, State::running);
  EXPECT_EQ(r->attempts, 1);
  EXPECT_EQ(r->worker, "w1");
  EXPECT_TRUE(r->started_at);
  EXPECT_EQ(r->progress, "50");
  EXPECT_EQ(r->result, "half");  // written while it runs
  gate.open();
  ASSERT_TRUE(wait_until([&] { return state_of(id) == State::done; }));
  rc.stop();
  r = record(id);
  EXPECT_EQ(r->result, R"({"sum":14})");
  EXPECT_EQ(r->result_json()["sum"], 14);
  EXPECT_TRUE(r->finished_at);
  EXPECT_GE(*r->finished_at, *r->started_at);
  // What one record costs the server (printed for the figure in docs/results-and-waiting.md).
  const detail::Reply usage = client.cmd({"MEMORY", "USAGE", stream + ":task:" + id});
  if (!usage.view().is_error()) {
    std::printf("[ memory   ] a done record (a %zu-byte result, progress, every field): %lld bytes\n",
                r->result->size(), static_cast<long long>(usage.view().integer()));
  }
  const std::int64_t ttl = client.integer({"PTTL", stream + ":task:" + id});
  EXPECT_GT(ttl, 50000);
  EXPECT_LE(ttl, 60000);
  EXPECT_EQ(events_of(id), (std::vector<std::string>{"enqueued", "started", "progress", "done"}));
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
}

TEST_F(TrackingTest, RetriesAndADeadLetterAreRecordedAndTheRecordLivesAsLongAsTheDeadLetter) {
  const std::string id =
      producer().enqueue("flaky", "{}", {.max_retries = 1, .retention = Retention{.done = 1min}});
  std::atomic<int> runs{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task&) {
      ++runs;
      throw std::runtime_error("attempt " + std::to_string(runs.load()));
    });
  });
  ASSERT_TRUE(wait_until([&] { return state_of(id) == State::dead; }));
  rc.stop();
  auto r = record(id);
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(r->error, "attempt 2");
  EXPECT_EQ(r->reason, "retries_exhausted");
  EXPECT_EQ(client.integer({"PTTL", stream + ":task:" + id}), -1);  // as long as its dead letter
  EXPECT_EQ(events_of(id), (std::vector<std::string>{"enqueued", "started", "retry", "started", "dead"}));
  // A replay starts it again; deleting its dead letter deletes the record.
  ASSERT_EQ(inspector.replay(stream).done, 1);
  EXPECT_EQ(state_of(id), State::queued);
  ASSERT_EQ(inspector.cancel(stream, id), CancelOutcome::cancelled);
  EXPECT_EQ(state_of(id), State::cancelled);  // kept as a done one is (Retention::done)
  EXPECT_GT(client.integer({"PTTL", stream + ":task:" + id}), 0);
  const std::string other = producer().enqueue("flaky", "{}", {.max_retries = 0, .retention = Retention{}});
  RunningConsumer again(
      options(), [&](Consumer& c) { c.on("flaky", [&](const Task&) { throw PermanentError("no"); }); });
  ASSERT_TRUE(wait_until([&] { return state_of(other) == State::dead; }));
  again.stop();
  EXPECT_EQ(record(other)->reason, "permanent");
  EXPECT_EQ(inspector.purge_dead(stream), 1);
  EXPECT_FALSE(record(other));
}

TEST_F(TrackingTest, ADelayedTaskIsDelayedThenQueuedAndARetentionOfZeroKeepsNothing) {
  const std::string id =
      producer().enqueue("work", "{}", {.delay = 300ms, .retention = Retention{.done = 0ms}});
  EXPECT_EQ(state_of(id), State::delayed);
  ASSERT_TRUE(record(id)->due_at);
  EXPECT_GT(*record(id)->due_at, *record(id)->enqueued_at);
  std::atomic<int> runs{0};
  auto o = options();
  o.forward_interval = 20ms;
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++runs; }); });
  ASSERT_TRUE(wait_until([&] { return runs == 1 && pending() == 0; }));
  ASSERT_TRUE(wait_until([&] { return !record(id); }));  // done: gone at once
  rc.stop();
  EXPECT_EQ(events_of(id), (std::vector<std::string>{"enqueued", "started", "done"}));
}

// A delayed task's due time and its record's enqueued_at come from one reading of the server's
// clock: due_at is enqueued_at + delay to the millisecond, for every task of a batch's script call
// (before, each record read the clock again after the call's due time was taken: the later
// tasks of a large call said they were enqueued after their due time minus the delay).
TEST_F(TrackingTest, ADelayedTasksDueTimeIsItsEnqueuedAtPlusItsDelay) {
  const std::string big(200'000, 'x');  // a slow call: each task's XADD copies its payload
  std::vector<TaskSpec> tasks(192, TaskSpec{.task_type = "work",
                                            .payload = nlohmann::json{{"pad", big}},
                                            .options = {.delay = 60s, .retention = Retention{.done = 1min}}});
  const std::vector<std::string> ids = producer().enqueue_batch(tasks);
  int off = 0;
  for (const std::string& id : ids) {
    const auto r = record(id);
    ASSERT_TRUE(r && r->due_at && r->enqueued_at) << id;
    off += *r->due_at - *r->enqueued_at != std::chrono::milliseconds(60'000) ? 1 : 0;
  }
  EXPECT_EQ(off, 0) << "of " << ids.size() << " tasks, due_at - enqueued_at was not the delay";
}

TEST_F(TrackingTest, AResultIsTheSucceedingAttemptsAndAKeyOfAnotherTypeIsLeftAlone) {
  // A partial result of a failed attempt is not the task's result.
  const std::string id = producer().enqueue("flaky", "{}", {.retention = Retention{.done = 1min}});
  // A key of another type under a second task's record name: tracking leaves it, nothing else
  // of the task is disturbed (its retry is written with the original's ack, once).
  const std::string other_id = "taken-name";
  client.cmd({"SET", stream + ":task:" + other_id, "someone else's"}).view().check();
  producer().enqueue("flaky", "{}", {.task_id = other_id, .retention = Retention{.done = 1min}});
  std::atomic<int> runs{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task& t) {
      ++runs;
      if (t.retry_count() == 0) {
        t.write_partial_result("half");
        throw std::runtime_error("first attempt fails");
      }
    });
  });
  ASSERT_TRUE(wait_until([&] { return state_of(id) == State::done && runs == 4 && pending() == 0; }));
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0; }));
  rc.stop();
  EXPECT_EQ(runs, 4);  // each task twice: no copy written twice
  EXPECT_FALSE(record(id)->result);
  EXPECT_EQ(record(id)->attempts, 2);
  EXPECT_EQ(client.cmd({"GET", stream + ":task:" + other_id}).view().str(), "someone else's");
  EXPECT_EQ(xlen(dlq), 0);
}

// A stale holder (its entry was reclaimed and started again elsewhere while its handler ran on)
// must not write its progress or partial result into the newer attempt's record. Its reports are
// held and written by the completer, which finds the record another worker's: refused, and the
// reports that follow are dropped (the calls return false once the refusal is known).
TEST_F(TrackingTest, AStaleHolderCannotReportIntoANewerAttemptsRecord) {
  const std::string id = producer().enqueue("long", "{}", {.retention = Retention{.done = 1min}});
  const std::string key = stream + ":task:" + id;
  std::atomic<bool> started{false}, newer{false}, refused{false};
  std::atomic<int> own = -1;
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      own = t.set_progress(0.25) ? 1 : 0;  // its own attempt: held, then written
      started = true;
      while (!newer) std::this_thread::sleep_for(5ms);
      // Every call is held at first; the refusal of the write is what ends them.
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!refused && std::chrono::steady_clock::now() < until) {
        refused = !t.set_progress(0.75) || !t.write_partial_result("stale");
        std::this_thread::sleep_for(20ms);
      }
    });
  });
  ASSERT_TRUE(wait_until([&] {
    return started.load() && client.cmd({"HGET", key, "progress"}).view().is_string();
  }));
  EXPECT_EQ(std::string(client.cmd({"HGET", key, "progress"}).view().str()), "0.25");
  // Another worker took the entry over and started it: attempt 2, its worker, its progress.
  client.cmd({"HSET", key, "attempts", "2", "worker", "new-holder", "progress", "0.1"});
  newer = true;
  ASSERT_TRUE(wait_until([&] { return refused.load(); }, 15s))
      << "the stale holder's reports were never refused";
  rc.stop();
  EXPECT_EQ(own.load(), 1);
  EXPECT_EQ(std::string(client.cmd({"HGET", key, "progress"}).view().str()), "0.1");
}

// The completer writes start marks many per running.lua call and successes many per done.lua
// call; each entry is owner-checked on its own: one that another consumer took over (or that
// is no longer pending) is left alone, and the others of the same call are written. A mark sent
// again (its reply was lost) is not counted twice; one sent with its success is written first.
TEST_F(TrackingTest, ABatchWhereOneEntryLostItsOwnerWritesTheOthersAndLeavesThatOneAlone) {
  const Retention keep{.done = 1min};
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(producer().enqueue("work", "{}", {.retention = keep}));
  const std::vector<std::string> entries = read_as("me", 4);
  ASSERT_EQ(entries.size(), 4u);
  // The second is taken over by another consumer.
  client.cmd({"XCLAIM", stream, "workers", "other", "0", entries[1]}).view().check();
  auto fields_of = [&](std::size_t k) {
    return std::vector<std::string>{"task_id", ids[k], "task_type", "work", "retention", "60000 0"};
  };
  // Marks for the first three (the fourth's goes with its success below).
  std::vector<std::string> running{"EVAL",    std::string(detail::script_source(detail::ScriptId::running)),
                                   "1",       stream,
                                   "workers", "me",
                                   stream,    "3"};
  for (std::size_t k = 0; k < 3; ++k) {
    running.push_back(entries[k]);
    running.push_back("1");
    running.push_back("6");
    for (const std::string& f : fields_of(k)) running.push_back(f);
  }
  for (int round = 0; round < 2; ++round) {  // the second: the same marks again, as after a lost reply
    const detail::Reply marked = client.cmd(running);
    ASSERT_TRUE(marked.view().is_array()) << (marked.view().is_error() ? marked.view().error() : "");
    EXPECT_EQ(marked.view()[0].integer(), 1);
    EXPECT_EQ(marked.view()[1].integer(), 0) << "a start was written for another consumer's entry";
    EXPECT_EQ(marked.view()[2].integer(), 1);
  }
  EXPECT_EQ(state_of(ids[0]), State::running);
  EXPECT_EQ(state_of(ids[1]), State::queued);
  EXPECT_EQ(state_of(ids[2]), State::running);
  EXPECT_EQ(record(ids[0])->attempts, 1) << "a mark sent twice was counted twice";
  EXPECT_EQ(events_of(ids[0]), (std::vector<std::string>{"enqueued", "started"}));

  // A report is written only for a running record of this worker whose entry is still this
  // worker's (or left the pending list as an orphan while it ran).
  auto report = [&](std::size_t k, const std::string& value) {
    return client
        .cmd({"EVAL", std::string(detail::script_source(detail::ScriptId::report)), "3",
              stream + ":task:" + ids[k], stream, stream + ":orphan:" + entries[k], stream, "workers", "me",
              entries[k], ids[k], "1", value, "0", ""})
        .view()
        .integer();
  };
  EXPECT_EQ(report(0, "0.5"), 1);
  client.cmd({"XCLAIM", stream, "workers", "other", "0", entries[2]}).view().check();
  EXPECT_EQ(report(2, "0.5"), 0) << "a report was written for an entry another consumer holds";
  client.cmd({"SET", stream + ":orphan:" + entries[2], "x"}).view().check();
  EXPECT_EQ(report(2, "0.6"), 1) << "an orphaned running task's report was refused";
  client.cmd({"DEL", stream + ":orphan:" + entries[2]}).view().check();
  client.cmd({"XCLAIM", stream, "workers", "me", "0", entries[2]}).view().check();
  EXPECT_EQ(record(ids[0])->progress, "0.5");

  // The other consumer finishes the second meanwhile (its retry, say, acknowledged it), so that
  // entry is no longer pending when this consumer's batch of successes comes.
  client.cmd({"XACK", stream, "workers", entries[1]}).view().check();
  std::vector<std::string> done{"EVAL", std::string(detail::script_source(detail::ScriptId::done)),
                                "2",    stream,
                                dlq,    "workers",
                                stream, "me",
                                "4"};
  for (std::size_t k = 0; k < 4; ++k) {
    const char* start = k == 3 ? "1" : "0";  // the fourth's start goes with its success
    for (const char* a : {entries[k].c_str(), "done", start, "1", "\"ok\"", "", ""}) done.emplace_back(a);
    done.push_back("6");
    for (const std::string& f : fields_of(k)) done.push_back(f);
  }
  const detail::Reply finished = client.cmd(done);
  ASSERT_TRUE(finished.view().is_array()) << (finished.view().is_error() ? finished.view().error() : "");
  EXPECT_EQ(finished.view()[0].integer(), 1);
  EXPECT_EQ(finished.view()[1].integer(), 0) << "a success was written for an entry no longer pending";
  EXPECT_EQ(finished.view()[2].integer(), 1);
  EXPECT_EQ(finished.view()[3].integer(), 1);
  EXPECT_EQ(state_of(ids[0]), State::done);
  EXPECT_EQ(state_of(ids[1]), State::queued);
  EXPECT_EQ(state_of(ids[2]), State::done);
  EXPECT_EQ(record(ids[2])->result, "\"ok\"");
  EXPECT_EQ(events_of(ids[1]), (std::vector<std::string>{"enqueued"}));
  // The fourth: started and done in one call, the start first, counted once.
  const auto fourth = record(ids[3]);
  ASSERT_TRUE(fourth);
  EXPECT_EQ(fourth->state, State::done);
  EXPECT_EQ(fourth->attempts, 1);
  EXPECT_EQ(fourth->worker, "me");
  EXPECT_TRUE(fourth->started_at);
  EXPECT_EQ(fourth->result, "\"ok\"");
  EXPECT_EQ(events_of(ids[3]), (std::vector<std::string>{"enqueued", "started", "done"}));
  EXPECT_GT(client.integer({"PTTL", stream + ":task:" + ids[3]}), 0);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
}

// Marks written with their task's success (the done script's start) and marks written alone
// ahead of it: in both, every task's 'started' precedes its 'done' in the events stream, and the
// record counts one attempt.
TEST_F(TrackingTest, EveryStartedEventPrecedesItsDoneEventUnderLoad) {
  constexpr int kTasks = 2000;
  std::vector<TaskSpec> specs;
  for (int i = 0; i < kTasks; ++i)
    specs.push_back({"work", Payload("{}"), {.retention = Retention{.done = 1min}}});
  const std::vector<std::string> ids = producer().enqueue_batch(specs);
  client.cmd({"CONFIG", "RESETSTAT"}).view().check();
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("work", [&](const Task&) {
      // Some run long enough for their mark to go alone, ahead of their completion.
      if (ran.fetch_add(1) % 16 == 0) std::this_thread::sleep_for(8ms);
    });
  });
  ASSERT_TRUE(wait_until([&] { return ran == kTasks && pending() == 0; }, 60s));
  rc.stop();
  // Both paths ran: marks alone (running.lua counts the attempt with HINCRBY) and marks with
  // their success (done.lua's HSET carries the count).
  const std::string stats(client.cmd({"INFO", "commandstats"}).view().str());
  const auto at = stats.find("cmdstat_hincrby:calls=");
  const long long alone = at == std::string::npos ? 0 : std::stoll(stats.substr(at + 22));
  std::printf("[ marks    ] %lld of %d written alone, the rest with their success\n", alone, kTasks);
  EXPECT_GT(alone, 0);
  EXPECT_LT(alone, kTasks);
  std::map<std::string, std::vector<std::string>> by_task;
  for (const auto& [event, task] : events()) by_task[task].push_back(event);
  ASSERT_EQ(by_task.size(), static_cast<std::size_t>(kTasks));
  for (const std::string& id : ids) {
    EXPECT_EQ(by_task[id], (std::vector<std::string>{"enqueued", "started", "done"})) << id;
    const auto r = record(id);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->state, State::done);
    EXPECT_EQ(r->attempts, 1);
    EXPECT_TRUE(r->started_at);
  }
}

// Reports are coalesced: a handler reporting in a tight loop costs at most one write per 100 ms,
// and the last value is in the record when the task ends.
TEST_F(TrackingTest, ProgressInATightLoopIsCoalescedAndItsLastValueIsKept) {
  const std::string id = producer().enqueue("loop", "{}", {.retention = Retention{.done = 1min}});
  std::atomic<long long> calls{0}, refused{0};
  std::atomic<double> seconds{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("loop", [&](const Task& t) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 1; i <= 200000; ++i) {
        if (!t.set_progress(i)) ++refused;
        ++calls;
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  });
  ASSERT_TRUE(wait_until([&] { return state_of(id) == State::done; }, 60s));
  rc.stop();
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(record(id)->progress, "200000");
  std::size_t writes = 0;
  for (const std::string& e : events_of(id)) writes += e == "progress" ? 1 : 0;
  // One write when the first call came, then at most one per 100 ms, and the last at the end.
  const auto most = static_cast<std::size_t>(seconds.load() / 0.1) + 3;
  std::printf("[ progress ] %lld calls in %.3f s (%.0f calls/s), %zu writes\n", calls.load(), seconds.load(),
              static_cast<double>(calls.load()) / seconds.load(), writes);
  EXPECT_GE(writes, 2u);
  EXPECT_LE(writes, most);
}

TEST_F(TrackingTest, UntrackedTasksHaveNoRecordAndNoEvents) {
  const std::string id = producer().enqueue("work", "{}");
  std::atomic<bool> tracked{true};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      tracked = t.tracked();
      t.set_result("ignored");
      EXPECT_FALSE(t.set_progress(1));
    });
  });
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 1; }));
  rc.stop();
  EXPECT_FALSE(tracked);
  EXPECT_FALSE(record(id));
  EXPECT_EQ(client.integer({"EXISTS", stream + ":events"}), 0);
  // The entry holds the seed's six fields, and a tracked one one more.
  const std::string tracked_id = producer().enqueue("work", "{}", {.retention = Retention{}});
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].second.size(), 7u);
  EXPECT_EQ(Client::get(entries[0].second, "retention"), "0 -1");
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), tracked_id);
}

}  // namespace
}  // namespace streamq::test
