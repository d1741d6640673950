// SPDX-License-Identifier: MIT
// Starting a worker: run() fails on a stream key of another type, a wrong password or missing
// permissions, and when called twice; a host it cannot reach is retried with growing, capped
// delays, each logged with its cause.
#include <chrono>
#include <exception>
#include <future>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "log_capture.hpp"
#include "redis_server.hpp"

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

}  // namespace
}  // namespace streamq::test
