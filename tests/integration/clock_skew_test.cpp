// SPDX-License-Identifier: MIT
// Client clocks that are wrong: producers and workers whose wall clocks are an hour off (under
// libfaketime) change no timing, as due times, leases and reclaim follow the server's clock.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "redis_server.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

// Wrong clocks: a producer and workers whose wall clocks are an hour off (libfaketime, from
// Debian's faketime package, which the test command installs; the monotonic clock is left alone,
// as a wrong wall clock leaves it). Due times, leases and reclaim follow the server's clock (TIME
// in the scripts, idle times of the pending list), so nothing runs early, nothing waits an hour,
// and a live worker's task is not taken from it.
TEST(Reliability, ClientClocksAnHourOffChangeNoTiming) {
  const std::string libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
  ASSERT_EQ(access(libfaketime.c_str(), R_OK), 0)
      << "libfaketime missing (scripts/install-deps.sh --test installs it)";
  const char* env_asan = std::getenv("ASAN_OPTIONS");
  const std::string asan_options = env_asan != nullptr ? env_asan : "";
  // The process itself under env (which execs it, so a kill reaches it), its clock `offset` off.
  const auto off = [&](const char* offset, std::vector<std::string> args) {
    std::vector<std::string> all{"/usr/bin/env", "LD_PRELOAD=" + libfaketime,
                                 std::string("FAKETIME=") + offset, "FAKETIME_DONT_FAKE_MONOTONIC=1",
                                 // Under ASan the preloaded library comes before ASan's runtime.
                                 "ASAN_OPTIONS=verify_asan_link_order=0:" + asan_options,
                                 STREAMQ_TEST_WORKER};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  };
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const auto server_ms = [&] {
    const detail::Reply r = client.cmd({"TIME"});
    const auto v = r.view().check();
    return v[0].as_int() * 1000 + v[1].as_int() / 1000;
  };
  // Producers an hour ahead and an hour behind: both tasks are due 2 s after the server's now.
  const std::int64_t before = server_ms();
  for (const char* offset : {"+1h", "-1h"}) {
    WorkerProcess producer(off(offset, {server.url(), stream, "enqueue", "work", "{}", "2000"}));
    ASSERT_EQ(producer.wait_exit(10s), 0) << offset;
  }
  const std::int64_t after = server_ms();
  const detail::Reply due = client.cmd({"ZRANGE", stream + ":delayed", "0", "-1", "WITHSCORES"});
  ASSERT_EQ(due.view().check().size(), 4u);
  for (std::size_t i = 1; i < 4; i += 2) {
    const auto score = static_cast<std::int64_t>(std::stod(std::string(due.view()[i].str())));
    EXPECT_GE(score, before + 2000);
    EXPECT_LE(score, after + 2000);
  }

  // A worker an hour ahead forwards them when they are due by the server's clock, not at once.
  WorkerProcess ahead(
      off("+1h", {server.url(), stream, "ahead", "min_idle_ms=1000", "heartbeat_ms=200", "reclaim_ms=200"}));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::max<std::int64_t>(0, before + 1500 - server_ms())));
  EXPECT_EQ(client.integer({"HLEN", stream + ":done"}), 0) << "run before they were due";
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"HLEN", stream + ":done"}) == 2;
      },
      15s))
      << "not run when due";

  // A task the worker an hour ahead holds (and keeps alive) is not reclaimed by one an hour
  // behind; once the first is killed, the second takes it after claim_min_idle of server time.
  const std::string held = Producer({.connection = {.url = server.url()}, .stream = stream})
                               .enqueue("hang", nlohmann::json{{"ms", 60000}});
  const auto started = [&] {
    const auto h = hash(client, stream + ":started");
    return h.count(held) != 0 ? h.at(held) : 0;
  };
  ASSERT_TRUE(wait_until([&] { return started() == 1; }));
  WorkerProcess behind(
      off("-1h", {server.url(), stream, "behind", "min_idle_ms=2000", "heartbeat_ms=200", "reclaim_ms=200"}));
  EXPECT_FALSE(wait_until([&] { return started() > 1; }, 3s)) << "a live worker's task was reclaimed";
  ahead.kill9();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_until([&] { return started() == 2; }, 15s)) << "the dead worker's task was not reclaimed";
  // Idle counts from the last heartbeat, due every 200 ms before the kill (later on a loaded
  // machine): not long before the reclaimer's claim_min_idle (2 s) after it, and not an hour off
  // either way.
  EXPECT_GE(std::chrono::steady_clock::now() - killed, 1000ms) << "reclaimed before claim_min_idle";
}

}  // namespace
}  // namespace streamq::test
