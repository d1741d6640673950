// SPDX-License-Identifier: MIT
// The asio component: the Producer's calls with completion tokens (coroutines suspend on them,
// many on one thread), cancellation of a wait, errors rethrown in the coroutine.
#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <asio.hpp>
#include <asio/experimental/awaitable_operators.hpp>

#include <streamq/asio.hpp>
#include <streamq/streamq.hpp>

#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

class AsioTest : public ::testing::Test {
 protected:
  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();
  Producer producer{{.connection = {.url = server.url()}, .stream = stream, .max_len = 100000}};

  /// A worker for "add" ({"a","b"} -> a + b) and "hang" (waits until the test ends).
  std::unique_ptr<RunningConsumer> worker() {
    return std::make_unique<RunningConsumer>(
        ConsumerOptions{.connection = {.url = server.url()}, .stream = stream}, [](Consumer& c) {
          c.on("add", [](const Task& t) {
            t.set_result(std::to_string(t.json().at("a").get<int>() + t.json().at("b").get<int>()));
          });
        });
  }

  /// Runs `body` as a coroutine on a one-thread io_context until it ends; rethrows what it threw.
  template <class F>
  void run_coroutine(F body) {
    asio::io_context io(1);
    std::exception_ptr error;
    asio::co_spawn(io, body(), [&](std::exception_ptr e) { error = e; });
    io.run();
    if (error) std::rethrow_exception(error);
  }
};

/// What the coroutines of the first test share (they all run on one thread: no lock).
struct Tally {
  std::vector<std::string> ids;
  std::set<std::thread::id> threads;
  int running = 0;
  int most_running = 0;
};

// GCC 12's coroutines mishandle temporaries among a co_await'ed call's arguments: a string
// literal does not compile ("array used as initializer"), a braced list or a designated
// initializer is destroyed twice. The arguments here are named objects.
const std::string kJob = "job";
const std::string kAdd = "add";

asio::awaitable<void> enqueue_twenty(Producer& producer, int c, Tally& tally) {
  ++tally.running;
  tally.most_running = std::max(tally.most_running, tally.running);
  for (int i = 0; i < 20; ++i) {
    const nlohmann::json payload{{"c", c}, {"i", i}};
    tally.ids.push_back(co_await producer.async_enqueue(kJob, payload, asio::use_awaitable));
    tally.threads.insert(std::this_thread::get_id());
  }
  --tally.running;
}

TEST_F(AsioTest, AHundredCoroutinesOnOneThreadEnqueueWithoutBlockingIt) {
  asio::io_context io(1);
  Tally tally;
  for (int c = 0; c < 100; ++c) asio::co_spawn(io, enqueue_twenty(producer, c, tally), asio::detached);
  io.run();
  EXPECT_EQ(tally.ids.size(), 2000u);
  EXPECT_EQ(std::set<std::string>(tally.ids.begin(), tally.ids.end()).size(), 2000u);
  EXPECT_EQ(client.integer({"XLEN", stream}), 2000);
  EXPECT_EQ(tally.most_running, 100) << "each coroutine was suspended on its enqueue, not its thread";
  ASSERT_EQ(tally.threads.size(), 1u);
  EXPECT_EQ(*tally.threads.begin(), std::this_thread::get_id()) << "resumed on its own executor";
}

TEST_F(AsioTest, ACoroutineEnqueuesAndWaitsForTheResult) {
  auto w = worker();
  // (Built outside the coroutine: GCC 12 mishandles a braced list's array inside one.)
  const Payload sum = {{"a", 2}, {"b", 40}};
  const std::vector<TaskSpec> tasks(3, TaskSpec{.task_type = kAdd, .payload = {{"a", 1}, {"b", 1}}});
  const EnqueueOptions tracked{.retention = Retention{.done = 1min}};
  run_coroutine([&]() -> asio::awaitable<void> {
    const std::string id = co_await producer.async_enqueue(kAdd, sum, tracked, asio::use_awaitable);
    const TaskRecord done = co_await producer.async_wait(id, 10s, asio::use_awaitable);
    EXPECT_EQ(done.state, TaskRecord::State::done);
    EXPECT_EQ(done.result_json(), 42);
    const std::vector<std::string> ids = co_await producer.async_enqueue_batch(tasks, asio::use_awaitable);
    EXPECT_EQ(ids.size(), 3u);
  });
}

TEST_F(AsioTest, ErrorsAreRethrownInTheCoroutine) {
  run_coroutine([&]() -> asio::awaitable<void> {
    const Payload bad = std::string("{not json");
    const Payload empty = std::string("{}");
    const EnqueueOptions unique{.unique_for = 1min, .unique_key = "k"};
    const std::string nothing = "nothing-like-it";
    EXPECT_THROW(co_await producer.async_enqueue(kJob, bad, asio::use_awaitable), PayloadError);
    co_await producer.async_enqueue(kJob, empty, unique, asio::use_awaitable);
    EXPECT_THROW(co_await producer.async_enqueue(kJob, empty, unique, asio::use_awaitable),
                 DuplicateTaskError);
    EXPECT_THROW(co_await producer.async_wait(nothing, 100ms, asio::use_awaitable), WaitTimeoutError);
  });
}

TEST_F(AsioTest, ACancelledWaitEndsAtOnceAndLeavesTheTaskAlone) {
  // No worker: the task stays queued, and the wait would take 30 s.
  const std::string id = producer.enqueue("add", R"({"a":1,"b":2})", {.retention = Retention{.done = 1min}});
  const auto start = std::chrono::steady_clock::now();
  run_coroutine([&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor, 300ms);
    // Whichever ends first cancels the other (through its cancellation slot).
    auto first =
        co_await (producer.async_wait(id, 30s, asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    EXPECT_EQ(first.index(), 1u) << "the timer ended first";
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(client.integer({"XLEN", stream}), 1) << "the task is still queued";
  run_coroutine([&]() -> asio::awaitable<void> {
    asio::cancellation_signal cancel;
    asio::steady_timer timer(co_await asio::this_coro::executor, 200ms);
    timer.async_wait([&](const asio::error_code&) { cancel.emit(asio::cancellation_type::terminal); });
    try {
      co_await producer.async_wait(id, 30s, asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
      ADD_FAILURE() << "the wait ended without the task";
    } catch (const asio::system_error& e) {
      EXPECT_EQ(e.code(), asio::error::operation_aborted);
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// The natural call, a string literal and a braced object among a co_await'ed call's arguments,
// compiles with GCC 12 (AsyncPayload reads the object member by member, no initializer_list)
// and writes the object (this target runs under ASan too: nothing destroyed twice).
TEST_F(AsioTest, ABracedPayloadInACoAwaitedEnqueueIsWrittenAsItsObject) {
  run_coroutine([&]() -> asio::awaitable<void> {
    co_await producer.async_enqueue("thumbnail", {{"photo", 1}}, asio::use_awaitable);
    co_await producer.async_enqueue("thumbnail", {{"photo", 2}, {"size", "large"}, {"crop", true}},
                                    asio::use_awaitable);
    co_await producer.async_enqueue("thumbnail", R"({"photo":3})", asio::use_awaitable);
  });
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(Client::get(entries[0].second, "payload")), (nlohmann::json{{"photo", 1}}));
  EXPECT_EQ(nlohmann::json::parse(Client::get(entries[1].second, "payload")),
            (nlohmann::json{{"photo", 2}, {"size", "large"}, {"crop", true}}));
  EXPECT_EQ(nlohmann::json::parse(Client::get(entries[2].second, "payload")), (nlohmann::json{{"photo", 3}}));
}

// A flow and a batch from a coroutine: enqueue_flow, open_batch and close_batch with completion
// tokens, each suspending the coroutine, their refusals rethrown in it.
TEST_F(AsioTest, ACoroutineEnqueuesAFlowAndOpensAndClosesABatch) {
  auto w = worker();
  const FlowNode flow = chord({TaskSpec{.task_type = kAdd, .payload = {{"a", 1}, {"b", 2}}},
                               TaskSpec{.task_type = kAdd, .payload = {{"a", 3}, {"b", 4}}}},
                              TaskSpec{.task_type = kAdd, .payload = {{"a", 0}, {"b", 0}}});
  const BatchOptions batch{.batch_id = "b-" + unique_key()};
  const std::string missing = "no-such-batch";
  run_coroutine([&]() -> asio::awaitable<void> {
    const FlowIds ids = co_await producer.async_enqueue_flow(flow, asio::use_awaitable);
    EXPECT_EQ(ids.children.size(), 2u);
    const TaskRecord root = co_await producer.async_wait(ids.task_id, 10s, asio::use_awaitable);
    EXPECT_EQ(root.state, TaskRecord::State::done);
    const std::string id = co_await producer.async_open_batch(batch, asio::use_awaitable);
    EXPECT_EQ(id, batch.batch_id);
    EXPECT_THROW(co_await producer.async_open_batch(batch, asio::use_awaitable), ConfigError);
    EXPECT_TRUE(co_await producer.async_close_batch(id, asio::use_awaitable));
    EXPECT_FALSE(co_await producer.async_close_batch(id, asio::use_awaitable));
    EXPECT_THROW(co_await producer.async_close_batch(missing, asio::use_awaitable), BatchClosedError);
  });
}

}  // namespace
}  // namespace streamq::test
