// SPDX-License-Identifier: MIT
// Producer::wait and enqueue_and_wait: the result of a tracked task, from the events stream
// while it runs and from its record when it finished before the wait; its final error; a
// clear timeout for an unknown task; a thousand waits at once.
#include <atomic>
#include <chrono>
#include <future>
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

struct Sum {
  int a = 0;
  int b = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Sum, a, b)

class WaitTest : public ConsumerTest {
 protected:
  /// A worker adding numbers: a typed handler returning its result; "fail" always fails.
  std::unique_ptr<RunningConsumer> adder() {
    auto o = options();
    o.concurrency = 8;
    o.prefetch = 64;
    return std::make_unique<RunningConsumer>(o, [](Consumer& c) {
      c.on<Sum>("add", [](const Sum& s) { return s.a + s.b; });
      c.on("fail", [](const Task&) { throw PermanentError("cannot add that"); });
    });
  }
};

TEST_F(WaitTest, EnqueueAndWaitReturnsWhatTheTypedHandlerReturned) {
  auto worker = adder();
  Producer p = producer();
  const TaskRecord r = p.enqueue_and_wait("add", Sum{.a = 2, .b = 40}, {}, 10s);
  EXPECT_EQ(r.state, TaskRecord::State::done);
  EXPECT_EQ(r.result_json(), 42);
  EXPECT_EQ(r.attempts, 1);
}

TEST_F(WaitTest, AWaitWithACompletionGetsTheRecordOrTheTimeout) {
  auto worker = adder();
  Producer p = producer();
  const std::string id = p.enqueue("add", Sum{.a = 20, .b = 22}, {.retention = Retention{.done = 1min}});
  std::promise<TaskRecord> done;
  p.wait_async(id, 10s, {}, [&](std::exception_ptr error, TaskRecord r) {
    if (error) return done.set_exception(error);
    done.set_value(std::move(r));
  });
  EXPECT_EQ(done.get_future().get().result_json(), 42);
  std::promise<TaskRecord> never;
  p.wait_async("no-such-task", 200ms, {}, [&](std::exception_ptr error, TaskRecord r) {
    if (error) return never.set_exception(error);
    never.set_value(std::move(r));
  });
  EXPECT_THROW(never.get_future().get(), WaitTimeoutError);
  std::promise<TaskRecord> refused;
  p.wait_async(id, -1ms, {}, [&](std::exception_ptr error, TaskRecord r) {
    if (error) return refused.set_exception(error);
    refused.set_value(std::move(r));
  });
  EXPECT_THROW(refused.get_future().get(), ConfigError);
}

TEST_F(WaitTest, AWaitForATaskThatFinishedBeforeItIsAnsweredFromItsRecord) {
  auto worker = adder();
  Producer p = producer();
  const std::string id = p.enqueue("add", Sum{.a = 1, .b = 1}, {.retention = Retention{.done = 1min}});
  ASSERT_TRUE(wait_until([&] { return worker->consumer().metrics().done == 1; }));
  worker->stop();  // nothing runs any more, no event comes: the record answers
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(p.wait(id, 5s).result_json(), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST_F(WaitTest, ATaskThatEndsDeadThrowsItsError) {
  auto worker = adder();
  Producer p = producer();
  try {
    p.enqueue_and_wait("fail", "{}", {}, 10s);
    ADD_FAILURE() << "no TaskFailedError";
  } catch (const TaskFailedError& e) {
    EXPECT_EQ(e.record().state, TaskRecord::State::dead);
    EXPECT_EQ(e.record().reason, "permanent");
    EXPECT_NE(std::string(e.what()).find("cannot add that"), std::string::npos) << e.what();
  }
}

TEST_F(WaitTest, AWaitForAnUnknownTaskTimesOutSayingSo) {
  Producer p = producer();
  const auto start = std::chrono::steady_clock::now();
  try {
    p.wait("no-such-task", 500ms);
    ADD_FAILURE() << "no WaitTimeoutError";
  } catch (const WaitTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("no record of task no-such-task"), std::string::npos) << e.what();
    EXPECT_FALSE(e.record());
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 3s);
  // A known task that does not finish in time says where it is.
  const std::string id = p.enqueue("add", Sum{}, {.retention = Retention{}});
  try {
    p.wait(id, 200ms);
    ADD_FAILURE() << "no WaitTimeoutError";
  } catch (const WaitTimeoutError& e) {
    ASSERT_TRUE(e.record());
    EXPECT_EQ(e.record()->state, TaskRecord::State::queued);
  }
}

TEST_F(WaitTest, AThousandWaitsOnAThousandTasksEachGetTheirOwnResult) {
  constexpr int kTasks = 1000;
  Producer p({.connection = {.url = server.url()},
              .stream = stream,
              .max_len = 100000,
              .retention = Retention{.done = 10min}});
  std::vector<TaskSpec> batch;
  for (int i = 0; i < kTasks; ++i) batch.push_back({"add", Sum{.a = i, .b = 1000}});
  const std::vector<std::string> ids = p.enqueue_batch(batch);
  // Every wait is open before a worker starts: all are answered by events.
  std::vector<std::future<TaskRecord>> waits;
  for (const std::string& id : ids) waits.push_back(p.wait_async(id, 60s));
  auto worker = adder();
  int right = 0;
  for (int i = 0; i < kTasks; ++i)
    right += waits[static_cast<std::size_t>(i)].get().result_json() == i + 1000;
  EXPECT_EQ(right, kTasks);
}

// Waits keep their timeout whatever Redis does: six waits at once on a frozen server each
// return at their own timeout, not one after another at the socket timeout (5 s here).
TEST_F(WaitTest, EveryWaitKeepsItsTimeoutWhileTheServerIsFrozen) {
  Producer p({.connection = {.url = server.url(), .socket_timeout = 5s}, .stream = stream});
  const std::string id = p.enqueue("add", Sum{}, {.retention = Retention{.done = 1min}});
  server.pause();
  struct Ended {
    std::chrono::steady_clock::duration took;
    std::string error;  // what the wait threw: "timeout: <message>", or another error
  };
  std::vector<std::future<Ended>> waits;
  for (int i = 0; i < 6; ++i) {
    waits.push_back(std::async(std::launch::async, [&] {
      const auto start = std::chrono::steady_clock::now();
      std::string error = "no error";
      try {
        p.wait(id, 500ms);
      } catch (const WaitTimeoutError& e) {
        error = std::string("timeout: ") + e.what();
      } catch (const Error& e) {
        error = e.what();
      }
      return Ended{std::chrono::steady_clock::now() - start, error};
    }));
  }
  std::vector<Ended> ended;
  for (auto& w : waits) ended.push_back(w.get());
  server.resume();
  for (const Ended& e : ended) {
    // The promise is 500 ms plus 100; the bound is loose for the sanitizer builds.
    EXPECT_LT(e.took, 1500ms) << std::chrono::duration_cast<std::chrono::milliseconds>(e.took).count()
                              << " ms";
    // A WaitTimeoutError that says the record was not read (the read is still stuck) or could
    // not be read (it failed), never a task that merely did not finish.
    EXPECT_TRUE(e.error.starts_with("timeout: ") &&
                (e.error.find("record was not read yet") != std::string::npos ||
                 e.error.find("record could not be read") != std::string::npos))
        << e.error;
  }
}

// A task whose record goes with its end (Retention::done = 0) finished while the waiter's thread
// was reading events for another wait: a wait for it registered afterwards still sees its end.
TEST_F(WaitTest, AWaitAfterTheEndOfATaskWithoutARecordSeesTheEnd) {
  auto o = options();
  o.concurrency = 2;
  RunningConsumer worker(o, [](Consumer& c) {
    c.on("slow", [](const Task&) { std::this_thread::sleep_for(3s); });
    c.on("quick", [](const Task&) {});
  });
  Producer p = producer();
  const std::string slow = p.enqueue("slow", "{}", {.retention = Retention{.done = 1min}});
  auto slow_wait = p.wait_async(slow, 20s);  // the waiter's thread reads events from now on
  std::this_thread::sleep_for(300ms);
  const std::string quick = p.enqueue("quick", "{}", {.retention = Retention{}});
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done >= 1; }));
  std::this_thread::sleep_for(500ms);  // its final event has been read by the waiter's thread
  const TaskRecord r = p.wait(quick, 2s);
  EXPECT_EQ(r.state, TaskRecord::State::done);
  EXPECT_EQ(slow_wait.get().state, TaskRecord::State::done);
}

// An id without a record (never tracked, unknown, expired) fails within about a second, whatever
// the timeout; WaitOptions::wait_for_enqueue waits for a task enqueued after the wait began.
TEST_F(WaitTest, AWaitOnAnIdWithoutARecordFailsSoonUnlessToldToWaitForIt) {
  Producer p = producer();
  const auto start = std::chrono::steady_clock::now();
  try {
    p.wait("no-such-task", 30s);
    ADD_FAILURE() << "no WaitTimeoutError";
  } catch (const WaitTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("no record of task no-such-task"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "it waited for the whole timeout";
  auto later = p.wait_async("later", 20s, {.wait_for_enqueue = true});
  std::this_thread::sleep_for(1500ms);
  auto worker = adder();
  p.enqueue("add", Sum{.a = 3, .b = 4}, {.task_id = "later", .retention = Retention{.done = 1min}});
  EXPECT_EQ(later.get().result_json(), 7);
}

// enqueue_and_wait with Retention{} (the record goes at the task's end): the waiter still gets
// the record the task ended with, its result and attempts, not a bare "done".
TEST_F(WaitTest, EnqueueAndWaitGetsTheResultWhenTheRecordIsNotKept) {
  auto worker = adder();
  Producer p = producer();
  const TaskRecord r = p.enqueue_and_wait("add", Sum{.a = 2, .b = 40}, {.retention = Retention{}}, 10s);
  EXPECT_EQ(r.state, TaskRecord::State::done);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.result_json(), 42);
}

// A record a wait read before its task ended is kept a minute after the end though its
// retention says it goes at once (Retention{}): the mark the wait set survives to the end, and
// a later reader still finds the result. A task no one waited on loses its record at the end.
TEST_F(WaitTest, ARecordAWaitReadBeforeTheEndIsKeptAMinuteThoughItsRetentionIsZero) {
  Producer p = producer();
  const std::string waited = p.enqueue("add", Sum{.a = 1, .b = 2}, {.retention = Retention{}});
  const std::string unwatched = p.enqueue("add", Sum{.a = 3, .b = 4}, {.retention = Retention{}});
  const std::string record = stream + ":task:" + waited;
  auto answer = std::async(std::launch::async, [&] { return p.wait(waited, 20s); });
  // The wait read the record while the task was queued (no worker yet): it marked it.
  ASSERT_TRUE(wait_until([&] { return client.cmd({"HGET", record, "waited"}).view().is_string(); }, 10s));
  auto worker = adder();
  const TaskRecord r = answer.get();
  EXPECT_EQ(r.state, TaskRecord::State::done);
  EXPECT_EQ(r.result_json(), 3);
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"EXISTS", stream + ":task:" + unwatched}) == 0;
      },
      10s))
      << "the record no wait read goes with its task's end";
  EXPECT_EQ(client.integer({"EXISTS", record}), 1) << "the waited record went at the end";
  const std::int64_t ttl = client.integer({"PTTL", record});
  EXPECT_GT(ttl, 50'000);
  EXPECT_LE(ttl, 60'000);
  const auto again = Inspector({.connection = {.url = server.url()}}).record(stream, waited);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->result_json(), 3);
}

}  // namespace
}  // namespace streamq::test
