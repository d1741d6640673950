// SPDX-License-Identifier: MIT
// A fixture for the tests of control over running work (timeouts, deadlines, cancels,
// concurrency limits, the process executor): a consumer that renews its leases and gives up on a
// handler quickly, a run that measures how many handlers ran at once, the one dead letter; and a
// handler's wait for its stop request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "at_once.hpp"
#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {

using namespace std::chrono_literals;

/// Waits until the task is asked to stop (or `most` passes); returns its stop reason then.
inline std::string wait_for_stop(const Task& task, std::chrono::milliseconds most = 20s) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, task.stop_token(), most, [] { return false; });
  return std::string(task.stop_reason());
}

class ControlTest : public ConsumerTest {
 protected:
  ConsumerOptions fast() const {
    ConsumerOptions o = options();
    o.heartbeat_interval = 100ms;
    o.claim_min_idle = 1000ms;
    o.timeout_grace = 300ms;
    return o;
  }
  /// Runs `tasks` tasks of 50 ms over `workers` consumers of `threads` handler threads each, the
  /// handler registered with `handler_options`; returns the most that ran at once.
  int most_at_once(int workers, int threads, int tasks, const ConsumerOptions& base,
                   const HandlerOptions& handler_options) {
    Producer p = producer();
    for (int i = 0; i < tasks; ++i) p.enqueue("t", "{}");
    AtOnce at_once;
    std::atomic<int> done{0};
    std::vector<std::unique_ptr<RunningConsumer>> running;
    for (int w = 0; w < workers; ++w) {
      ConsumerOptions o = base;
      o.concurrency = threads;
      o.prefetch = threads;
      running.push_back(std::make_unique<RunningConsumer>(o, [&](Consumer& c) {
        c.on(
            "t",
            [&](const Task&) {
              at_once.enter();
              std::this_thread::sleep_for(50ms);
              at_once.leave();
              ++done;
            },
            handler_options);
      }));
    }
    EXPECT_TRUE(wait_until([&] { return done.load() == tasks; }, 60s));
    std::uint64_t limited = 0;
    for (auto& r : running) {
      r->stop();
      limited += r->consumer().metrics().rate_limited;
    }
    EXPECT_GT(limited, 0U) << "no start ever waited: the limit was not tested";
    return at_once.most();
  }
  /// A tracked task held by a worker that died ("killed-worker") is cancelled; the worker `o`
  /// takes it over: it must end it cancelled, not run it to done, and the request goes.
  void expect_the_next_holder_ends_a_cancel_cancelled(const ConsumerOptions& o) {
    Producer p = producer();
    const std::string id = p.enqueue("t", "{}", {.max_retries = 3, .retention = Retention{.done = 1h}});
    const auto held = read_as("killed-worker", 1);  // it held the task and died
    ASSERT_EQ(held.size(), 1U);
    Inspector in({.connection = {.url = server.url()}});
    EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
    std::atomic<int> ran{0};
    RunningConsumer worker(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++ran; }); });
    ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
    worker.stop();
    EXPECT_EQ(ran.load(), 0);
    EXPECT_EQ(worker.consumer().metrics().done, 0U);
    EXPECT_EQ(xlen(stream), 0);
    EXPECT_EQ(pending(), 0);
    EXPECT_EQ(client.cmd({"KEYS", stream + ":cancel:*"}).view().size(), 0U)
        << "the request goes with the task";
    const auto record = in.record(stream, id);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->state, TaskRecord::State::cancelled);
    EXPECT_EQ(record->attempts, 0);
  }
  /// The only dead letter's fields (empty when there is none).
  Fields dead_letter() {
    const auto all = client.xrange(dlq);
    return all.size() == 1 ? all[0].second : Fields{};
  }
};

}  // namespace streamq::test
