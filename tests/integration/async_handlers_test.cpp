// SPDX-License-Identifier: MIT
// Asynchronous handlers (Consumer::on_async, the callback form; the asio coroutine form is in
// tests/asio): many tasks in flight on one handler thread, each held until its `done`, with the
// outcomes, limits, timeouts, cancels, give-ups and shutdown of a thread handler.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "at_once.hpp"
#include "control_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// A thread that runs what handlers hand it: an asynchronous handler's work, ended elsewhere.
class Loop {
 public:
  Loop() : thread_([this](const std::stop_token& stop) { main(stop); }) {}
  void post(std::function<void()> f) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
  }

 private:
  void main(const std::stop_token& stop) {
    std::unique_lock lock(mutex_);
    while (cv_.wait(lock, stop, [&] { return !queue_.empty(); })) {
      auto f = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      f();
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable_any cv_;
  std::deque<std::function<void()>> queue_;
  std::jthread thread_;
};

/// Calls `done` with `error` once the task is asked to stop (it ends as a handler that returns
/// when asked to would), on the thread that asks.
struct EndOnStop {
  std::stop_callback<std::function<void()>> callback;
  EndOnStop(const Task& task, Consumer::AsyncDone done)
      : callback(task.stop_token(), std::function<void()>([done = std::move(done)] {
                   done(std::make_exception_ptr(std::runtime_error("stopped")));
                 })) {}
};

class AsyncHandlerTest : public ControlTest {};

TEST_F(AsyncHandlerTest, OneHandlerThreadHoldsManyTasksUntilEachIsDone) {
  constexpr int kTasks = 300;
  Producer p = producer();
  for (int i = 0; i < kTasks; ++i) p.enqueue("t", "{}");
  std::mutex m;
  std::vector<Consumer::AsyncDone> waiting;
  std::atomic<int> calls{0};
  ConsumerOptions o = options();
  o.concurrency = 1;
  o.prefetch = 2 * kTasks;  // the fetcher reads while at least half of it is free
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on_async("t", [&](const Task&, Consumer::AsyncDone done) {
      ++calls;
      std::lock_guard lock(m);
      waiting.push_back(std::move(done));
    });
  });
  // Every task is started by the one handler thread while none has ended.
  ASSERT_TRUE(wait_until([&] { return calls.load() == kTasks; }, 30s));
  EXPECT_EQ(worker.consumer().metrics().done, 0U);
  EXPECT_EQ(pending(), kTasks) << "each task holds its entry until it is done";
  std::vector<Consumer::AsyncDone> all;
  {
    std::lock_guard lock(m);
    all.swap(waiting);
  }
  // Ended from other threads, in any order.
  std::thread a([&] {
    for (std::size_t i = 0; i < all.size(); i += 2) all[i](nullptr);
  });
  std::thread b([&] {
    for (std::size_t i = 1; i < all.size(); i += 2) all[i](nullptr);
  });
  a.join();
  b.join();
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == kTasks; }, 30s));
  ASSERT_TRUE(wait_until([&] { return xlen(stream) == 0 && pending() == 0; }, 10s));
  worker.stop();
  EXPECT_EQ(calls.load(), kTasks) << "none ran twice";
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
}

TEST_F(AsyncHandlerTest, WhatDoneCarriesDecidesAsAThrowWould) {
  Producer p = producer();
  p.enqueue("fail", "{}", {.max_retries = 1});
  p.enqueue("permanent", "{}", {.max_retries = 5});
  p.enqueue("throws", "{}", {.max_retries = 0});
  p.enqueue("twice", "{}");
  Loop loop;
  std::atomic<int> fails{0}, twice{0};
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on_async("fail", [&](const Task&, Consumer::AsyncDone done) {
      ++fails;
      loop.post([done] { done(std::make_exception_ptr(std::runtime_error("upstream 503"))); });
    });
    c.on_async("permanent", [&](const Task&, const Consumer::AsyncDone& done) {
      loop.post([done] { done(std::make_exception_ptr(PermanentError("bad request"))); });
    });
    c.on_async("throws",
               [&](const Task&, const Consumer::AsyncDone&) { throw std::runtime_error("at the start"); });
    c.on_async("twice", [&](const Task&, const Consumer::AsyncDone& done) {
      ++twice;
      done(nullptr);
      done(std::make_exception_ptr(std::runtime_error("the second says nothing")));
    });
  });
  ASSERT_TRUE(wait_until(
      [&] {
        const auto m = worker.consumer().metrics();
        return m.dead_lettered == 3 && m.done == 1;
      },
      20s));
  std::this_thread::sleep_for(300ms);
  worker.stop();
  const auto m = worker.consumer().metrics();
  EXPECT_EQ(fails.load(), 2) << "one retry, then the dead letter";
  EXPECT_EQ(m.retried, 1U);
  EXPECT_EQ(m.dead_lettered, 3U);
  EXPECT_EQ(m.done, 1U);
  EXPECT_EQ(twice.load(), 1);
  EXPECT_EQ(xlen(dlq), 3);
  std::vector<std::string> errors;
  for (const auto& [id, fields] : client.xrange(dlq)) errors.push_back(Client::get(fields, "error"));
  EXPECT_NE(std::find(errors.begin(), errors.end(), "upstream 503"), errors.end());
  EXPECT_NE(std::find(errors.begin(), errors.end(), "bad request"), errors.end());
  EXPECT_NE(std::find(errors.begin(), errors.end(), "at the start"), errors.end());
  EXPECT_EQ(pending(), 0);
}

TEST_F(AsyncHandlerTest, ATimeoutAsksTheTaskToStopAndItsEndCountsAsTimedOut) {
  Producer p = producer();
  const std::string id = p.enqueue("slow", "{}", {.max_retries = 0});
  std::mutex m;
  std::vector<std::unique_ptr<EndOnStop>> ends;
  std::atomic<int> calls{0};
  const auto started = std::chrono::steady_clock::now();
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on_async("slow",
               [&](const Task& task, Consumer::AsyncDone done) {
                 ++calls;
                 std::lock_guard lock(m);
                 ends.push_back(std::make_unique<EndOnStop>(task, std::move(done)));
               },
               {.timeout = 300ms});
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().dead_lettered == 1; }, 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 8s);
  worker.stop();
  EXPECT_EQ(worker.consumer().metrics().timed_out, 1U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 0U) << "it ended when asked";
  const auto dead = client.xrange(dlq);
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(Client::get(dead[0].second, "reason"), "timeout");
  EXPECT_EQ(Client::get(dead[0].second, "task_id"), id);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(AsyncHandlerTest, ATaskThatIgnoresItsStopIsGivenUpAndItsLateDoneIsDropped) {
  Producer p = producer();
  p.enqueue("deaf", "{}", {.max_retries = 0});
  std::mutex m;
  Consumer::AsyncDone late;
  std::atomic<int> calls{0};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on_async("deaf",
               [&](const Task&, Consumer::AsyncDone done) {
                 ++calls;
                 std::lock_guard lock(m);
                 late = std::move(done);
               },
               {.timeout = 200ms});
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().given_up == 1; }, 10s));
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && pending() == 0; }, 10s));
  {
    std::lock_guard lock(m);
    ASSERT_TRUE(late);
    late(nullptr);  // its success now changes nothing
  }
  std::this_thread::sleep_for(500ms);
  worker.stop();
  const auto mx = worker.consumer().metrics();
  EXPECT_EQ(mx.done, 0U);
  EXPECT_EQ(mx.dead_lettered, 1U);
  EXPECT_EQ(xlen(dlq), 1);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(AsyncHandlerTest, ACancelEndsARunningAsynchronousTaskCancelled) {
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}", {.max_retries = 3, .retention = Retention{.done = 1h}});
  std::mutex m;
  std::vector<std::unique_ptr<EndOnStop>> ends;
  std::atomic<bool> started{false};
  std::string why;
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on_async("t", [&](const Task& task, Consumer::AsyncDone done) {
      std::lock_guard lock(m);
      ends.push_back(std::make_unique<EndOnStop>(task, [&task, &why, done](const std::exception_ptr& e) {
        why = task.stop_reason();
        done(e);
      }));
      started = true;
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(why, "cancelled");
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
  EXPECT_EQ(in.record(stream, id)->state, TaskRecord::State::cancelled);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
}

TEST_F(AsyncHandlerTest, TheWorkersStopHandsARunningAsynchronousTaskBackUncounted) {
  const std::string id = producer().enqueue("long", "{}", {.max_retries = 0});
  std::mutex m;
  std::vector<std::unique_ptr<EndOnStop>> ends;
  std::atomic<bool> started{false};
  {
    ConsumerOptions o = options();
    o.retry_backoff = {.base = std::chrono::hours(1), .cap = std::chrono::hours(1), .jitter = false};
    RunningConsumer worker(o, [&](Consumer& c) {
      c.on_async("long", [&](const Task& task, Consumer::AsyncDone done) {
        std::lock_guard lock(m);
        ends.push_back(std::make_unique<EndOnStop>(task, std::move(done)));
        started = true;
      });
    });
    ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
    worker.stop();
    EXPECT_EQ(worker.consumer().metrics().handed_back, 1U);
    EXPECT_EQ(worker.consumer().metrics().retried, 0U);
    EXPECT_EQ(worker.consumer().metrics().dead_lettered, 0U);
  }
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), id);
  EXPECT_EQ(Client::get(entries[0].second, "retry_count"), "0") << "the deploy spent no retry";
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(AsyncHandlerTest, MaxInFlightAndTheConcurrencyLimitBoundTasksInFlight) {
  constexpr int kTasks = 60;
  Producer p = producer();
  for (int i = 0; i < kTasks; ++i) p.enqueue(i % 2 == 0 ? "local" : "redis", "{}");
  Loop loop;
  AtOnce local, redis;
  std::atomic<int> ended{0};
  // Each task ends 30 ms after its start, on the loop's thread.
  const auto later = [&](AtOnce& at_once, Consumer::AsyncDone done) {
    std::thread([&at_once, &ended, &loop, done = std::move(done)] {
      std::this_thread::sleep_for(30ms);
      loop.post([&at_once, &ended, done] {
        at_once.leave();
        ++ended;
        done(nullptr);
      });
    }).detach();
  };
  ConsumerOptions o = options();
  o.concurrency = 1;
  o.prefetch = kTasks;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on_async("local",
               [&](const Task&, Consumer::AsyncDone done) {
                 local.enter();
                 later(local, std::move(done));
               },
               {.max_in_flight = 3});
    c.on_async("redis",
               [&](const Task&, Consumer::AsyncDone done) {
                 redis.enter();
                 later(redis, std::move(done));
               },
               {.concurrency = {.limit = 2}});
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == kTasks; }, 60s));
  ASSERT_TRUE(wait_until([&] { return ended.load() == kTasks; }, 10s));
  worker.stop();
  EXPECT_LE(local.most(), 3);
  EXPECT_GE(local.most(), 2) << "tasks did overlap on the one thread";
  EXPECT_LE(redis.most(), 2);
  EXPECT_GT(worker.consumer().metrics().rate_limited, 0U) << "no start waited: the limits were not tested";
  EXPECT_EQ(client.integer({"ZCARD", stream + ":running"}), 0) << "every slot given back";
  EXPECT_EQ(client.integer({"ZCARD", stream + ":running:redis"}), 0);
}

TEST_F(AsyncHandlerTest, ADoneDroppedUncalledFailsTheAttemptAndOneCalledBeforeAThrowStands) {
  Producer p = producer();
  const std::string dropped = p.enqueue("drops", "{}", {.max_retries = 0});
  p.enqueue("done-then-throws", "{}", {.max_retries = 0});
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on_async("drops", [](const Task&, const Consumer::AsyncDone&) {});  // keeps no copy of done
    c.on_async("done-then-throws", [](const Task&, const Consumer::AsyncDone& done) {
      done(nullptr);
      throw std::runtime_error("after its done: ignored");
    });
  });
  ASSERT_TRUE(wait_until(
      [&] {
        const auto m = worker.consumer().metrics();
        return m.dead_lettered == 1 && m.done == 1;
      },
      10s));
  worker.stop();
  const auto dead = client.xrange(dlq);
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(Client::get(dead[0].second, "task_id"), dropped);
  EXPECT_EQ(Client::get(dead[0].second, "error"),
            "the asynchronous handler's done was destroyed without being called");
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
  EXPECT_EQ(pending(), 0);
}

TEST_F(AsyncHandlerTest, ATrackedTaskReportsFromAnyThreadAndItsPlaceIsFreeOnceDone) {
  constexpr int kTasks = 4;
  Producer p({.connection = {.url = server.url()},
              .stream = stream,
              .retention = Retention{.done = std::chrono::hours(1)}});
  std::vector<std::string> ids;
  for (int i = 0; i < kTasks; ++i) ids.push_back(p.enqueue("t", "{}"));
  Loop loop;
  std::mutex m;
  std::vector<Consumer::AsyncDone> kept;  // copies of every done, kept after it was called
  std::atomic<int> written{0};
  ConsumerOptions o = options();
  o.concurrency = 1;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on_async("t",
               [&](const Task& task, Consumer::AsyncDone done) {
                 {
                   std::lock_guard lock(m);
                   kept.push_back(done);
                 }
                 loop.post([&task, &written, done] {
                   if (task.set_progress(nlohmann::json{{"step", 1}})) ++written;
                   task.set_result("\"ok\"");
                   done(nullptr);
                 });
               },
               {.max_in_flight = 1});
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == kTasks; }, 20s))
      << "a kept copy of done held the one place";
  worker.stop();
  EXPECT_EQ(written.load(), kTasks) << "each progress was written, on the loop's thread";
  Inspector in({.connection = {.url = server.url()}});
  for (const std::string& id : ids) {
    const auto record = in.record(stream, id);
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->state, TaskRecord::State::done);
    EXPECT_EQ(record->result.value_or(""), "\"ok\"");
  }
}

TEST_F(AsyncHandlerTest, RegistrationsAreChecked) {
  Consumer c(options());
  EXPECT_THROW(c.on_async("", [](const Task&, const Consumer::AsyncDone&) {}), ConfigError);
  EXPECT_THROW(c.on_async("t", Consumer::AsyncHandler{}), ConfigError);
  EXPECT_THROW(
      c.on_async("p", [](const Task&, const Consumer::AsyncDone&) {}, {.executor = HandlerExecutor::process}),
      ConfigError);
  c.on("t", [](const Task&) {});
  EXPECT_THROW(c.on_async("t", [](const Task&, const Consumer::AsyncDone&) {}), ConfigError) << "a duplicate";
  c.on_async("u", [](const Task&, const Consumer::AsyncDone&) {});
  EXPECT_THROW(c.on("u", [](const Task&) {}), ConfigError) << "a duplicate";
}

}  // namespace
}  // namespace streamq::test
