// SPDX-License-Identifier: MIT
// Coroutine handlers (Consumer::on_async with an asio executor): thousands of tasks in flight on
// two threads, the task's stop (timeout, the worker's stop) as asio cancellation, a returned
// value as the task's result.
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>
#include <asio.hpp>

#include <streamq/asio.hpp>
#include <streamq/streamq.hpp>

#include "at_once.hpp"
#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// An io_context run by `n` threads until destroyed (declare it before the consumer that uses it).
struct IoThreads {
  explicit IoThreads(int n) {
    for (int i = 0; i < n; ++i) threads.emplace_back([this] { io.run(); });
  }
  ~IoThreads() {
    work.reset();
    io.stop();
    for (auto& t : threads) t.join();
  }
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::vector<std::thread> threads;
};

/// Waits `d` on a timer of the coroutine's executor.
asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

class CoroutineHandlerTest : public ConsumerTest {};

TEST_F(CoroutineHandlerTest, TenThousandTasksWaitingOneSecondEachRunTogetherOnTwoThreads) {
  constexpr int kTasks = 10'000;
  Producer p({.connection = {.url = server.url()}, .stream = stream, .max_len = 100'000});
  for (int chunk = 0; chunk < kTasks / 1000; ++chunk) {
    std::vector<TaskSpec> specs(1000, TaskSpec{.task_type = "wait", .payload = "{}"});
    p.enqueue_batch(std::move(specs));
  }
  IoThreads io(2);
  std::mutex m;
  std::unordered_map<std::string, int> runs;
  AtOnce at_once;
  std::atomic<int> ended{0};
  ConsumerOptions o = options();
  o.concurrency = 2;
  o.prefetch = 2 * kTasks;
  const auto started = std::chrono::steady_clock::now();
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on_async(io.io, "wait", [&](const Task& task) -> asio::awaitable<void> {
      {
        std::lock_guard lock(m);
        ++runs[task.id()];
      }
      at_once.enter();
      co_await sleep_for(1s);
      at_once.leave();
      ++ended;
    });
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == kTasks; }, 180s))
      << worker.consumer().metrics().done << " done";
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }, 30s));
  worker.stop();
  std::cout << "[ figure ] " << kTasks
            << " tasks of a 1 s timer, 2 handler threads and 2 io threads: all done in " << took.count()
            << " ms; at most " << at_once.most() << " in flight at once\n";
  RecordProperty("all_done_ms", static_cast<int>(took.count()));
  EXPECT_EQ(ended.load(), kTasks);
  EXPECT_EQ(runs.size(), static_cast<std::size_t>(kTasks));
  for (const auto& [id, n] : runs) ASSERT_EQ(n, 1) << "task " << id << " ran " << n << " times";
  EXPECT_GT(at_once.most(), 1000) << "the tasks did not wait together";
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
}

TEST_F(CoroutineHandlerTest, ATimeoutCancelsTheCoroutinesWait) {
  Producer p = producer();
  p.enqueue("slow", "{}", {.max_retries = 0});
  IoThreads io(1);
  std::atomic<bool> aborted{false};
  const auto started = std::chrono::steady_clock::now();
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on_async(io.io.get_executor(), "slow",
               [&](const Task&) -> asio::awaitable<void> {
                 try {
                   co_await sleep_for(60s);
                 } catch (const asio::system_error& e) {
                   aborted = e.code() == asio::error::operation_aborted;
                   throw;
                 }
               },
               {.timeout = 300ms});
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().dead_lettered == 1; }, 20s));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 15s);
  worker.stop();
  EXPECT_TRUE(aborted.load()) << "the timer's wait ended with operation_aborted";
  EXPECT_EQ(worker.consumer().metrics().timed_out, 1U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 0U) << "the coroutine ended when cancelled";
  const auto dead = client.xrange(dlq);
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(Client::get(dead[0].second, "reason"), "timeout");
}

TEST_F(CoroutineHandlerTest, AValueTheCoroutineReturnsIsTheTasksResult) {
  Producer p = producer();
  const std::string id =
      p.enqueue("add", nlohmann::json{{"a", 40}, {"b", 2}}.dump(), {.retention = Retention{.done = 1h}});
  IoThreads io(1);
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on_async(io.io, "add", [](const Task& task) -> asio::awaitable<int> {
      co_await sleep_for(10ms);
      co_return task.json().at("a").get<int>() + task.json().at("b").get<int>();
    });
  });
  const TaskRecord record = p.wait(id, 20s);
  EXPECT_EQ(record.state, TaskRecord::State::done);
  ASSERT_TRUE(record.result.has_value());
  EXPECT_EQ(*record.result, "42");
}

TEST_F(CoroutineHandlerTest, TheWorkersStopCancelsTheCoroutineAndHandsTheTaskBack) {
  const std::string id = producer().enqueue("long", "{}", {.max_retries = 0});
  IoThreads io(1);
  std::atomic<bool> started{false}, aborted{false};
  {
    RunningConsumer worker(options(), [&](Consumer& c) {
      c.on_async(io.io, "long", [&](const Task&) -> asio::awaitable<void> {
        started = true;
        try {
          co_await sleep_for(60s);
        } catch (const asio::system_error& e) {
          aborted = e.code() == asio::error::operation_aborted;
          throw;
        }
      });
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
    const auto stopping = std::chrono::steady_clock::now();
    worker.stop();
    EXPECT_LT(std::chrono::steady_clock::now() - stopping, 10s) << "run() waited for the timer";
    EXPECT_EQ(worker.consumer().metrics().handed_back, 1U);
    EXPECT_EQ(worker.consumer().metrics().dead_lettered, 0U);
  }
  EXPECT_TRUE(aborted.load());
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), id);
  EXPECT_EQ(Client::get(entries[0].second, "retry_count"), "0");
}

TEST_F(CoroutineHandlerTest, AnIoContextDestroyedWithTheCoroutinePendingFailsItsTask) {
  producer().enqueue("orphaned", "{}", {.max_retries = 0});
  auto io = std::make_unique<IoThreads>(1);
  std::atomic<bool> started{false};
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on_async(io->io, "orphaned", [&](const Task&) -> asio::awaitable<void> {
      started = true;
      co_await sleep_for(60s);
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  io.reset();  // stopped and destroyed: the coroutine's frame and its done go with it
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().dead_lettered == 1; }, 10s))
      << "the task held its entry with nothing left to end it";
  worker.stop();
  const auto dead = client.xrange(dlq);
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(Client::get(dead[0].second, "error"),
            "the asynchronous handler's done was destroyed without being called");
  EXPECT_EQ(pending(), 0);
}

}  // namespace
}  // namespace streamq::test
