// SPDX-License-Identifier: MIT
// Timeouts and deadlines: a timeout stops the handler through its stop_token and ends the
// attempt as a failure (retried, then dead-lettered with reason timeout); a handler that ignores
// it is given up after timeout_grace and its late return dropped; a deadline already past
// dead-letters the task unrun, and one reached while it runs stops it without a retry.
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "control_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(ControlTest, ATimeoutStopsTheHandlerAndRetriesThenDeadLettersWithReasonTimeout) {
  Producer p = producer();
  p.enqueue("slow", "{}", {.max_retries = 1});
  std::atomic<int> attempts{0};
  std::vector<std::string> reasons;
  std::mutex m;
  ConsumerOptions o = fast();
  o.timeout_grace = 3s;  // the handler returns at once when asked: never given up
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("slow",
         [&](const Task& task) {
           ++attempts;
           const std::string why = wait_for_stop(task);
           std::lock_guard lock(m);
           reasons.push_back(why);
           // Returning normally after a timeout does not make it a success.
         },
         {.timeout = 200ms});
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 20s));
  worker.stop();
  EXPECT_EQ(attempts.load(), 2);
  EXPECT_EQ(reasons, (std::vector<std::string>{"timeout", "timeout"}));
  const Fields f = dead_letter();
  EXPECT_EQ(Client::get(f, "reason"), "timeout");
  EXPECT_NE(Client::get(f, "error").find("timeout of 200 ms"), std::string::npos) << Client::get(f, "error");
  EXPECT_EQ(worker.consumer().metrics().timed_out, 2U);
  EXPECT_EQ(worker.consumer().metrics().retried, 1U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 0U);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
}

TEST_F(ControlTest, AHandlerThatIgnoresItsTimeoutIsGivenUpAndItsLateReturnIsDropped) {
  Producer p = producer();
  p.enqueue("stuck", "{}", {.max_retries = 0});
  std::atomic<bool> let_return{false}, returned{false};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("stuck",
         [&](const Task&) {
           // Ignores its stop_token: returns only once the test saw its fate (or after 20 s).
           wait_until([&] { return let_return.load(); }, 20s);
           returned = true;
         },
         {.timeout = 200ms});
  });
  // The fate is written at timeout + grace (about 0.5 s), while the handler still runs.
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 10s)) << "the dead letter waited for the handler";
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(Client::get(dead_letter(), "reason"), "timeout");
  EXPECT_EQ(pending(), 0);
  let_return = true;
  ASSERT_TRUE(wait_until([&] { return returned.load(); }, 10s));
  std::this_thread::sleep_for(300ms);  // its completion, were it written, would be by now
  worker.stop();
  EXPECT_EQ(xlen(dlq), 1);
  EXPECT_EQ(worker.consumer().metrics().done, 0U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 1U);
  EXPECT_EQ(worker.consumer().metrics().dead_lettered, 1U);
}

TEST_F(ControlTest, ADeadlineAlreadyPastDeadLettersTheTaskWithoutRunningIt) {
  Producer p = producer();
  p.enqueue("t", "{}", {.deadline = std::chrono::system_clock::now() - 1s});
  std::atomic<int> ran{0};
  RunningConsumer worker(fast(), [&](Consumer& c) { c.on("t", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(Client::get(dead_letter(), "reason"), "deadline");
}

TEST_F(ControlTest, ADeadlineReachedWhileRunningStopsTheHandlerAndIsNotRetried) {
  Producer p = producer();
  std::string why;
  std::atomic<int> ran{0};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("t",
         [&](const Task& task) {
           ++ran;
           why = wait_for_stop(task);
           throw std::runtime_error("stopped");
         },
         {.timeout = 1h});  // the deadline comes first
  });
  // Enqueued once the worker set up its group, so it starts well before its deadline (3 s: the
  // worker may still be connecting and replaying its pending list on a loaded machine).
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stream}) == 1; }, 10s));
  p.enqueue("t", "{}", {.max_retries = 5, .deadline = std::chrono::system_clock::now() + 3s});
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 15s));
  worker.stop();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(why, "deadline");
  const Fields f = dead_letter();
  EXPECT_EQ(Client::get(f, "reason"), "deadline");
  EXPECT_NE(Client::get(f, "error").find("(stopped)"), std::string::npos) << Client::get(f, "error");
}

}  // namespace
}  // namespace streamq::test
