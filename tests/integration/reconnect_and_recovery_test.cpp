// SPDX-License-Identifier: MIT
// A running worker recovers from what happens to its server: lost connections are logged,
// reestablished and counted, its own pending entries replayed after a reconnect; a server that
// comes back empty, or whose group and stream were deleted, gets them back without a hot loop; a
// busy server's refused completions are written again later, each task run once.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "log_capture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// The id of the client whose last command was XREADGROUP (a consumer's fetcher), or "".
std::string reader_client_id(Client& c) {
  const std::string list(c.cmd({"CLIENT", "LIST"}).view().str());
  for (std::size_t start = 0; start < list.size();) {
    const auto end = list.find('\n', start);
    const std::string line = list.substr(start, end - start);
    if (line.find("cmd=xreadgroup") != std::string::npos) {
      const auto id = line.find("id=");
      return line.substr(id + 3, line.find(' ', id) - id - 3);
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
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

TEST_F(ConsumerTest, OwnPendingEntriesAreReplayedAfterAReconnect) {
  auto p = producer();
  for (int i = 0; i < 3; ++i) p.enqueue("work", "{}");
  const auto ids = read_as("other", 3);
  ASSERT_EQ(ids.size(), 3u);
  std::atomic<int> ran{0};
  auto o = options();
  o.consumer_name = "slot-r";  // claim_min_idle stays 30 s: only a replay runs them soon
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  std::string reader;
  ASSERT_TRUE(wait_until([&] { return !(reader = reader_client_id(client)).empty(); }));
  // The entries land in this consumer's pending list behind its back (as a phantom delivery
  // or a crash of an earlier process under its name would leave them) ...
  for (const auto& id : ids) client.cmd({"XCLAIM", stream, "workers", "slot-r", "0", id}).view().check();
  // ... and its reader's connection is cut: after reconnecting it replays its own entries.
  client.cmd({"CLIENT", "KILL", "ID", reader}).view().check();
  ASSERT_TRUE(wait_until([&] { return ran == 3 && pending() == 0 && xlen(stream) == 0; }));
  rc.stop();
  EXPECT_EQ(rc.consumer().metrics().replayed, 3u);
  EXPECT_GE(rc.consumer().metrics().reconnects, 1u);
}

TEST(ConsumerRecovery, AServerThatComesBackEmptyGetsItsGroupBack) {
  // No persistence: after the restart the stream and the group are gone. The consumer's
  // replay of its own pending entries, the first thing after a reconnect, meets NOGROUP.
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  std::atomic<int> ran{0};
  RunningConsumer rc({.connection = {.url = server.url(), .backoff_base = 20ms, .backoff_max = 200ms},
                      .stream = stream,
                      .block = 200ms},
                     [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  Producer p(
      {.connection = {.url = server.url(), .backoff_base = 20ms, .backoff_max = 200ms}, .stream = stream});
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 1; }));
  server.restart();
  // The group is back (created by the consumer, at 0) and new tasks run.
  ASSERT_TRUE(wait_until([&] {
    try {
      return client.integer({"EXISTS", stream}) == 1;
    } catch (const ConnectionError&) {
      return false;
    }
  }));
  ASSERT_TRUE(succeeds_eventually([&] { p.enqueue("work", "{}"); }));
  ASSERT_TRUE(wait_until([&] { return ran == 2; }));
  EXPECT_GE(rc.consumer().metrics().reconnects, 1u);
}

TEST_F(ConsumerTest, RecreatesDeletedGroupAndStream) {
  auto p = producer();
  std::atomic<int> ran{0};
  RunningConsumer rc(options(), [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 1; }));
  client.cmd({"XGROUP", "DESTROY", stream, "workers"}).view().check();
  ASSERT_TRUE(wait_until([&] { return client.cmd({"XINFO", "GROUPS", stream}).view().size() == 1; }));
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 2; }));
  client.cmd({"DEL", stream});
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stream}) == 1; }));
  p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 3; }));
  // No hot loop while it recovered: a handful of commands, not thousands. Redis 7.0 counts
  // XGROUP CREATE on its own; 6.2 counts every XGROUP subcommand (this test's DESTROY too).
  const std::string info(client.cmd({"INFO", "commandstats"}).view().str());
  std::size_t pos = std::string::npos;
  for (const std::string key : {"cmdstat_xgroup|create:calls=", "cmdstat_xgroup:calls="}) {
    if (pos = info.find(key); pos != std::string::npos) {
      pos += key.size();
      break;
    }
  }
  ASSERT_NE(pos, std::string::npos) << info;
  EXPECT_LT(std::stoi(info.substr(pos)), 20);
}

TEST_F(ConsumerTest, CompletionsRefusedByABusyServerAreRetriedAndCountedOnceWritten) {
  RedisServer busy_server({.extra = {"--lua-time-limit", "100"}});
  Client admin(busy_server.url());
  // Connected now: a client connects on its first command, and a handshake while the script
  // below keeps the server busy would be refused with BUSY (seen under load in CI).
  admin.cmd({"PING"}).view().check();
  const std::string s = unique_key();
  Producer p({.connection = {.url = busy_server.url()}, .stream = s});
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> started{0}, ran{0}, warmed{0};
  LogCapture log(LogLevel::info);
  RunningConsumer rc(
      {.connection = {.url = busy_server.url()}, .stream = s, .concurrency = 5, .block = 200ms},
      [&](Consumer& c) {
        c.on("warm", [&](const Task& t) {
          if (t.retry_count() == 0) throw std::runtime_error("once");  // via the completer
          ++warmed;
        });
        c.on("work", [&](const Task&) {
          ++started;
          std::unique_lock lock(m);
          cv.wait(lock, [&] { return open; });
          ++ran;
        });
      });
  p.enqueue("warm", "{}");  // every connection of the consumer is up and has written once
  ASSERT_TRUE(wait_until([&] { return warmed == 1 && rc.consumer().metrics().done == 1; }));
  for (int i = 0; i < 5; ++i) p.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return started == 5; }));
  // A script that never ends: after lua-time-limit the server answers BUSY to everything but
  // SCRIPT KILL (MULTI excepted), as it answers LOADING while it loads its data after a
  // restart. An ack batch then gets BUSY for XACK and XDEL, and for EXEC.
  struct BusyScript {
    std::thread thread;
    Client& admin;
    void kill() {
      if (!thread.joinable()) return;
      try {
        admin.cmd({"SCRIPT", "KILL"});
      } catch (const std::exception& e) {
        ADD_FAILURE() << "SCRIPT KILL: " << e.what();  // never out of the destructor
      }
      thread.join();
    }
    ~BusyScript() { kill(); }
  } script{std::thread([&] {
             try {
               Client looper(busy_server.url());
               looper.cmd({"EVAL", "while true do end", "0"});  // returns once SCRIPT KILL ends it
             } catch (const std::exception& e) {
               ADD_FAILURE() << "the busy script ended on its own: " << e.what();
             }
           }),
           admin};
  ASSERT_TRUE(wait_until([&] {
    const detail::Reply r = admin.cmd({"PING"});
    return r.view().is_error() && r.view().error().starts_with("BUSY");
  }));
  {
    std::lock_guard lock(m);
    open = true;
  }
  cv.notify_all();
  ASSERT_TRUE(wait_until([&] { return ran == 5 && log.count(LogLevel::warning, "refused for now") >= 1; }));
  EXPECT_EQ(rc.consumer().metrics().done, 1u);  // nothing written, so nothing counted
  script.kill();
  ASSERT_TRUE(wait_until([&] { return rc.consumer().metrics().done == 6; }));
  const detail::Reply pel = admin.cmd({"XPENDING", s, "workers"});
  EXPECT_EQ(pel.view()[0].integer(), 0);
  EXPECT_EQ(admin.integer({"XLEN", s}), 0);
  rc.stop();
  EXPECT_EQ(ran, 5);  // each ran once: the acks were retried, not the tasks
  EXPECT_EQ(log.count(LogLevel::error, "completing entry"), 0u);  // none given up
}

}  // namespace
}  // namespace streamq::test
