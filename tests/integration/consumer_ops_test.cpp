// SPDX-License-Identifier: MIT
// A Consumer against a server that misbehaves or is tidied up under it: scripts flushed, its
// reader's connection killed, the server busy, stale consumers piling up in the group.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "log_capture.hpp"
#include "redis/scripts.hpp"
#include "running_consumer.hpp"
#include "wire/codec.hpp"
#include "wire/fate_args.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// A value of `INFO <section>`, e.g. info_field("errorstats", "errorstat_NOSCRIPT:count").
std::int64_t info_field(Client& c, const std::string& section, const std::string& key) {
  const std::string info(c.cmd({"INFO", section}).view().str());
  const auto pos = info.find(key + "=");
  return pos == std::string::npos ? 0 : std::stoll(info.substr(pos + key.size() + 1));
}

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

std::set<std::string> consumer_names(Client& c, const std::string& stream) {
  std::set<std::string> names;
  const detail::Reply r = c.cmd({"XINFO", "CONSUMERS", stream, "workers"});
  const auto v = r.view().check();
  for (std::size_t i = 0; i < v.size(); ++i) names.emplace(v[i].field("name").str());
  return names;
}

TEST_F(ConsumerTest, ScriptsFlushedUnderARunningConsumerAreSentAgain) {
  auto p = producer();
  std::atomic<int> done{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("fail_once", [&](const Task& t) {
      if (t.retry_count() == 0) throw std::runtime_error("first attempt");
      ++done;
    });
  });
  p.enqueue("fail_once", "{}");
  ASSERT_TRUE(wait_until([&] { return done == 1 && pending() == 0; }));  // the move script is cached now
  client.cmd({"SCRIPT", "FLUSH"}).view().check();
  p.enqueue("fail_once", "{}");
  ASSERT_TRUE(wait_until([&] { return done == 2 && pending() == 0 && xlen(stream) == 0; }));
  rc.stop();
  EXPECT_EQ(rc.consumer().metrics().retried, 2u);
  EXPECT_GE(info_field(client, "errorstats", "errorstat_NOSCRIPT:count"), 1);  // EVALSHA was refused ...
  EXPECT_EQ(xlen(dlq), 0);                                                     // ... and EVAL did the work
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

TEST_F(ConsumerTest, AnOrphanRecordIsWrittenOnceHoweverOftenItsWriteIsRepeated) {
  // The write of a provisional record may be repeated when its reply was lost; a second run
  // must answer with the first record, not write another (the task would be in two places).
  producer().enqueue("work", R"({"k":1})");
  const auto ids = read_as("holder", 1);
  ASSERT_EQ(ids.size(), 1u);
  client.cmd({"XDEL", stream, ids[0]}).view().check();
  const std::string_view source = detail::script_source(detail::ScriptId::orphan);
  auto write = [&] {
    return client.cmd({"EVAL", source, "3", stream, dlq, stream + ":orphan:" + ids[0], "workers", "holder",
                       ids[0], "30000", "dead_letter", "body_lost", "gone", "2026-12-01T00:00:00.000000",
                       "1000", stream, "task_id", "t"});
  };
  const detail::Reply first = write();
  ASSERT_TRUE(first.view().is_string()) << (first.view().is_error() ? first.view().error() : "");
  const detail::Reply again = write();
  ASSERT_TRUE(again.view().is_string());
  EXPECT_EQ(again.view().str(), first.view().str());
  EXPECT_EQ(xlen(dlq), 1);
  EXPECT_EQ(pending(), 0);
}

// ---------------------------------------------------------------- the Lua, as Redis runs it

TEST_F(ConsumerTest, EveryScriptHashIsTheOneRedisComputes) {
  // The SHA-1 is computed at build time; a wrong one would make every EVALSHA miss.
  for (std::size_t i = 0; i < static_cast<std::size_t>(detail::ScriptId::count_); ++i) {
    const auto id = static_cast<detail::ScriptId>(i);
    const detail::Reply r = client.cmd({"SCRIPT", "LOAD", detail::script_source(id)});
    ASSERT_TRUE(r.view().is_string())
        << detail::script_name(id) << ": " << (r.view().is_error() ? r.view().error() : "");
    EXPECT_EQ(r.view().str(), detail::script_sha(id)) << detail::script_name(id);
  }
}

TEST_F(ConsumerTest, ADeadLetterKeepsTheFieldsAndSaysWhatHappened) {
  xadd({{"task_id", "t1"}, {"payload", "{}"}, {"reason", "forged"}, {"priority", "high"}});
  const auto ids = read_as("holder", 1);
  ASSERT_EQ(ids.size(), 1u);
  detail::Argv argv;
  const std::string source(detail::script_source(detail::ScriptId::move));
  const Fields read = {{"task_id", "t1"}, {"payload", "{}"}, {"reason", "forged"}, {"priority", "high"}};
  std::vector<std::string> args{"EVAL", source, "2", stream, dlq, "workers", "holder", ids[0]};
  detail::append_dead_letter(argv, "permanent", "card declined", "2026-12-01T00:00:00.000000", stream, read);
  for (std::size_t i = 0; i < argv.size(); ++i) args.emplace_back(argv[i]);
  const detail::Reply r = client.cmd(args);
  ASSERT_TRUE(r.view().is_string()) << (r.view().is_error() ? r.view().error() : "");
  const detail::Reply range = client.cmd({"XRANGE", dlq, "-", "+"});
  const auto entries = range.view().check();
  ASSERT_EQ(entries.size(), 1u);
  std::vector<std::pair<std::string, std::string>> got;
  const auto f = entries[0][1];
  for (std::size_t i = 0; i + 1 < f.size(); i += 2) got.emplace_back(f[i].str(), f[i + 1].str());
  const Fields want = {{"task_id", "t1"},
                       {"payload", "{}"},
                       {"priority", "high"},
                       {"error", "card declined"},
                       {"failed_at", "2026-12-01T00:00:00.000000"},
                       {"original_id", ids[0]},
                       {"consumer", "holder"},
                       {"reason", "permanent"}};  // the entry's own "reason" is replaced
  EXPECT_EQ(got, want);
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(xlen(stream), 0);
}

TEST_F(ConsumerTest, ADeadLetterKeepsAtMostTheFieldCap) {
  xadd({{"task_id", "t1"}});
  const auto ids = read_as("holder", 1);
  ASSERT_EQ(ids.size(), 1u);
  Fields read;
  for (std::size_t i = 0; i < detail::kMaxFields + 250; ++i) read.emplace_back("f" + std::to_string(i), "v");
  const std::string source(detail::script_source(detail::ScriptId::move));
  std::vector<std::string> args{"EVAL", source, "2", stream, dlq, "workers", "holder", ids[0]};
  detail::Argv argv;
  detail::append_dead_letter(argv, "malformed", "too many fields", "t", stream, read);
  for (std::size_t i = 0; i < argv.size(); ++i) args.emplace_back(argv[i]);
  const detail::Reply r = client.cmd(args);
  ASSERT_TRUE(r.view().is_string()) << (r.view().is_error() ? r.view().error() : "");
  const detail::Reply range = client.cmd({"XRANGE", dlq, "-", "+"});
  const auto f = range.view().check()[0][1];
  ASSERT_EQ(f.size(), 2 * (detail::kMaxFields + 1 + 5));
  EXPECT_EQ(f[2 * (detail::kMaxFields - 1)].str(), "f" + std::to_string(detail::kMaxFields - 1));
  EXPECT_EQ(f[2 * detail::kMaxFields].str(), "fields_dropped");
  EXPECT_EQ(f[2 * detail::kMaxFields + 1].str(), "250");
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

TEST_F(ConsumerTest, IdleConsumersWithoutPendingEntriesAreRemovedFromTheGroup) {
  auto p = producer();
  p.enqueue("work", "{}");
  ASSERT_EQ(read_as("old-busy", 1).size(), 1u);  // a dead worker still holding an entry
  client.cmd({"XGROUP", "CREATECONSUMER", stream, "workers", "old-idle"}).view().check();
  const auto idle_of = [&](const std::string& name) -> std::int64_t {
    const detail::Reply r = client.cmd({"XINFO", "CONSUMERS", stream, "workers"});
    const auto v = r.view().check();
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].field("name").str() == name) return v[i].field("idle").as_int();
    }
    return -1;
  };
  ASSERT_TRUE(wait_until([&] { return idle_of("old-idle") >= 600 && idle_of("old-busy") >= 600; }));
  std::atomic<int> ran{0};
  auto o = options();
  o.consumer_name = "live";
  o.claim_min_idle = 300ms;
  o.heartbeat_interval = 100ms;
  o.reclaim_interval = 50ms;
  o.idle_consumer_timeout = 500ms;
  RunningConsumer rc(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++ran; }); });
  // old-idle goes; old-busy stays while it holds an entry (deleting it would drop the entry),
  // until the reclaimer has taken that over and the task ran; this consumer is never removed.
  // The worker counts a removal after XGROUP DELCONSUMER has answered, so the count is waited
  // for as well: the group can already show only "live" while the count is still 1.
  ASSERT_TRUE(wait_until([&] {
    return consumer_names(client, stream) == std::set<std::string>{"live"} && pending() == 0 &&
           xlen(stream) == 0 && rc.consumer().metrics().consumers_removed >= 2;
  }));
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(rc.consumer().metrics().consumers_removed, 2u);
  EXPECT_EQ(rc.consumer().metrics().reclaimed, 1u);
}

}  // namespace
}  // namespace streamq::test
