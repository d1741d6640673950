// SPDX-License-Identifier: MIT
// A Consumer's life: what run() refuses, how it stops (stop tokens, the grace period, a
// handler that outlives it), its signal handlers, and how it retries a host it cannot reach.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "log_capture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// Runs c.run() and returns what it threw; fails the test (and stops the consumer) when it
/// has not thrown within 10 s, so a run() that stopped throwing cannot hang the suite.
std::exception_ptr run_error(Consumer& c) {
  auto result = std::async(std::launch::async, [&c]() -> std::exception_ptr {
    try {
      c.run();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  });
  if (result.wait_for(10s) != std::future_status::ready) {
    ADD_FAILURE() << "run() did not return within 10 s";
    c.stop();
  }
  return result.get();
}

std::string reply_error_prefix(const std::exception_ptr& e) {
  if (!e) return "<no exception>";
  try {
    std::rethrow_exception(e);
  } catch (const ReplyError& r) {
    return r.prefix();
  } catch (const std::exception& other) {
    return std::string("<not a ReplyError: ") + other.what() + ">";
  }
}

TEST_F(ConsumerTest, RunFailsOnAStreamKeyOfAnotherType) {
  client.cmd({"SET", stream, "x"});
  Consumer c(options());
  EXPECT_EQ(reply_error_prefix(run_error(c)), "WRONGTYPE");
}

TEST(ConsumerRun, FailsOnAWrongPasswordAndOnMissingPermissions) {
  RedisServer server({.extra = {"--requirepass", "s3cret"}});
  const std::string port = std::to_string(server.port());
  Client admin("redis://:s3cret@127.0.0.1:" + port);
  admin.cmd({"ACL", "SETUSER", "no-xgroup", "on", ">pw", "~*", "+@all", "-xgroup"}).view().check();
  {
    Consumer c({.connection = {.url = "redis://:wrong@127.0.0.1:" + port}, .stream = unique_key()});
    EXPECT_EQ(reply_error_prefix(run_error(c)), "WRONGPASS");
  }
  {
    Consumer c({.connection = {.url = "redis://no-xgroup:pw@127.0.0.1:" + port}, .stream = unique_key()});
    EXPECT_EQ(reply_error_prefix(run_error(c)), "NOPERM");
  }
}

TEST_F(ConsumerTest, RunCanBeCalledOnlyOnce) {
  Consumer c(options());
  c.on("work", [](const Task&) {});
  std::thread stopper([&] {
    ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stream}) == 1; }));  // it set up
    c.stop();
  });
  EXPECT_EQ(run_error(c), nullptr);
  stopper.join();
  const std::exception_ptr second = run_error(c);
  ASSERT_TRUE(second);
  EXPECT_THROW(std::rethrow_exception(second), ConfigError);
}

TEST_F(ConsumerTest, HandlersSeeTheStopRequest) {
  producer().enqueue("long", "{}");
  std::atomic<bool> started{false}, saw_stop{false};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("long", [&](const Task& t) {
      started = true;
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      // A long task that checkpoints and returns early when its worker stops.
      cv.wait_for(lock, t.stop_token(), 60s, [] { return false; });
      saw_stop = t.stop_requested();
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }));
  const auto t0 = std::chrono::steady_clock::now();
  rc.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // not the handler's 60 s
  EXPECT_TRUE(saw_stop);
  EXPECT_EQ(rc.consumer().metrics().done, 1u);
  EXPECT_EQ(xlen(stream), 0);
}

TEST_F(ConsumerTest, HandlerPastTheGracePeriodKeepsItsEntryAndBlocksNeitherRunNorTheDestructor) {
  producer().enqueue("stuck", "{}");
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> started{false}, handler_returned{false}, destroyed{false};
  std::string name;
  auto o = options();
  o.shutdown_grace = 200ms;
  {
    auto rc = std::make_unique<RunningConsumer>(o, [&](Consumer& c) {
      c.on("stuck", [&](const Task&) {
        started = true;
        {
          std::unique_lock lock(m);
          cv.wait(lock, [&] { return release; });  // ignores the stop request
        }
        // Last, after the unlock: once the test sees it, it ends, and m (on its stack) is gone.
        handler_returned = true;
      });
    });
    name = rc->consumer().name();
    ASSERT_TRUE(wait_until([&] { return started.load(); }));
    // If stop() or the destructor waited for the handler, this would open it after 20 s.
    std::thread watchdog([&] {
      std::unique_lock lock(m);
      if (!cv.wait_for(lock, 20s, [&] { return destroyed.load(); })) release = true;
      cv.notify_all();
    });
    rc->stop();  // run() returns after the grace period
    rc.reset();  // ~Consumer
    destroyed = true;
    cv.notify_all();
    watchdog.join();
  }
  EXPECT_FALSE(handler_returned) << "run() or ~Consumer waited for the handler";
  // Its entry is still pending, owned by the stopped consumer and not released.
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  const auto entry = pending_entry(entries[0].first);
  EXPECT_EQ(entry.owner, name);
  EXPECT_LT(entry.idle_ms, 60000);
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(wait_until([&] { return handler_returned.load(); }));
  // Nobody wrote its completion: another worker reclaims it after claim_min_idle.
  std::atomic<int> reran{0};
  auto o2 = options();
  o2.claim_min_idle = 300ms;
  o2.heartbeat_interval = 100ms;
  o2.reclaim_interval = 50ms;
  RunningConsumer again(o2, [&](Consumer& c) { c.on("stuck", [&](const Task&) { ++reran; }); });
  ASSERT_TRUE(wait_until([&] { return reran == 1 && xlen(stream) == 0 && pending() == 0; }));
}

TEST_F(ConsumerTest, PreviousSignalHandlersAreRestored) {
  struct sigaction custom {
  }, before_int{}, before_term{};
  custom.sa_handler = [](int) {};
  sigemptyset(&custom.sa_mask);
  ASSERT_EQ(sigaction(SIGINT, &custom, &before_int), 0);
  ASSERT_EQ(sigaction(SIGTERM, &custom, &before_term), 0);
  auto current = [](int sig) {
    struct sigaction now {};
    sigaction(sig, nullptr, &now);
    return now.sa_handler;
  };
  {
    auto o = options();
    o.stop_on_signals = true;
    RunningConsumer rc(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
    // While run() runs, the consumer's handlers are installed ...
    ASSERT_TRUE(wait_until(
        [&] { return current(SIGINT) != custom.sa_handler && current(SIGTERM) != custom.sa_handler; }));
  }
  // ... and afterwards the previous ones are back.
  EXPECT_EQ(current(SIGINT), custom.sa_handler);
  EXPECT_EQ(current(SIGTERM), custom.sa_handler);
  sigaction(SIGINT, &before_int, nullptr);
  sigaction(SIGTERM, &before_term, nullptr);
}

TEST(ConsumerRun, AnUnreachableHostIsRetriedWithGrowingCappedDelaysAndTheCause) {
  int port = 0;
  {
    RedisServer gone;
    port = gone.port();
  }
  LogCapture log(LogLevel::info);
  Consumer c({.connection = {.url = "redis://127.0.0.1:" + std::to_string(port),
                             .backoff_base = 10ms,
                             .backoff_max = 400ms},
              .stream = unique_key()});
  std::thread runner([&] { c.run(); });
  std::this_thread::sleep_for(2s);  // the time under observation
  c.stop();
  runner.join();
  const std::regex line(
      R"(^start: redis 127\.0\.0\.1:\d+: connect: Connection refused; retrying in (\d+) ms$)");
  std::size_t attempts = 0;
  for (const auto& [level, text] : log.lines()) {
    std::smatch match;
    if (!std::regex_match(text, match, line)) continue;
    ++attempts;
    EXPECT_EQ(level, LogLevel::warning) << text;
    EXPECT_LE(std::stoi(match[1]), 400) << text;  // the cap
  }
  // Without a growing delay, 2 s of 10 ms retries would be ~200 attempts; with the delay
  // drawn from [0, min(400, 10 * 2^n)] ms, 40 attempts would take ~8 s on average.
  EXPECT_GE(attempts, 3u);
  EXPECT_LE(attempts, 40u);
  EXPECT_EQ(c.metrics().reconnects, 0u);  // no connection was ever made
}

TEST_F(ConsumerTest, LostConnectionsAreLoggedAndCountedWhenReestablished) {
  LogCapture log(LogLevel::info);
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  auto p = producer();
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 1 && pending() == 0; }));
  EXPECT_EQ(rc.consumer().metrics().reconnects, 0u);
  client.cmd({"CLIENT", "KILL", "TYPE", "normal"}).view().check();     // every client but this one
  ASSERT_TRUE(succeeds_eventually([&] { p.enqueue("work", "{}"); }));  // its first call finds the socket dead
  ASSERT_TRUE(
      wait_until([&] { return ran == 2 && pending() == 0 && rc.consumer().metrics().reconnects >= 1; }));
  rc.stop();
  EXPECT_LE(rc.consumer().metrics().reconnects, 4u);  // fetcher, completer, scheduler, control at most
  EXPECT_GE(log.count(LogLevel::warning, "reconnecting"), 1u);
}

TEST_F(ConsumerTest, RetriesLogAtDebugAndDeadLettersAtWarning) {
  LogCapture log(LogLevel::debug);
  auto p = producer();
  for (int i = 0; i < 20; ++i) p.enqueue("flaky", "{}", {.max_retries = 1});
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task&) { throw std::runtime_error("backend down"); });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 20 && pending() == 0; }));
  rc.stop();
  EXPECT_EQ(log.count(LogLevel::debug, "failed, retry 1 of 1: backend down"), 20u);
  EXPECT_EQ(log.count(LogLevel::info, "failed, retry"), 0u);
  EXPECT_EQ(log.count(LogLevel::warning, "(retries_exhausted): backend down"), 20u);
}

}  // namespace
}  // namespace streamq::test
