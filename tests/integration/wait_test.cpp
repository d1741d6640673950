// SPDX-License-Identifier: MIT
// Producer::wait and enqueue_and_wait: the result of a tracked task, from the events stream
// while it runs and from its record when it finished before the wait; its final error; a
// clear timeout for an unknown task; a thousand waits at once.
#include <atomic>
#include <chrono>
#include <future>
#include <string>
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

}  // namespace
}  // namespace streamq::test
