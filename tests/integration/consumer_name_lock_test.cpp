// SPDX-License-Identifier: MIT
// A consumer name is held by one live process at a time: a second process with the same name
// is refused, a clean stop frees it, a restart after a kill takes it at once, and a process whose
// name was taken while it was stopped stops when it goes on.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// The run token of a consumer name's value "<client id> <token> <ms written>".
std::string run_token(std::string_view value) {
  const std::size_t from = value.find(' ') + 1;
  return std::string(value.substr(from, value.find(' ', from) - from));
}

/// A worker process holding consumer name "slot-0" of a fresh queue on a server of its own,
/// busy with a task that hangs (leases of ten minutes, the name renewed every 200 s).
struct NamedHolder {
  explicit NamedHolder(const RedisServerOptions& options = {}) : server(options) {}
  /// Whether the worker started the task.
  bool started() {
    return wait_until([&] { return hash(client, stream + ":started").count(held) == 1; });
  }

  RedisServer server;
  Client client{server.url()};
  const std::string stream = unique_key();
  const std::string key = detail::live_key(stream, "workers", "slot-0");
  Producer producer{ProducerOptions{.connection = {.url = server.url()}, .stream = stream}};
  const std::string held = producer.enqueue("hang", nlohmann::json{{"ms", 600000}});
  const std::vector<std::string> args{STREAMQ_TEST_WORKER,  server.url(),         stream, "slot-0",
                                      "min_idle_ms=600000", "heartbeat_ms=200000"};
  WorkerProcess first{args};
};

// Two processes, one consumer name: while a consumer runs, it holds its name in
// <stream>:live:<group length>:<group>:<name> with its client id. A second live process with
// the same name is refused (ConfigError: streamq_test_worker exits with status 3), and a
// clean stop frees the name.
TEST(Reliability, ASecondLiveProcessWithTheSameConsumerNameIsRefused) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string key = detail::live_key(stream, "workers", "slot-0");
  WorkerProcess first({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0"});
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", key}) == 1; }));
  const std::string held_by(client.cmd({"GET", key}).view().str());
  const std::string log = server.dir() + "/second.log";
  WorkerProcess second({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0"}, log);
  const int status = second.wait_exit(10s);
  ASSERT_TRUE(WIFEXITED(status)) << "still running, or killed by a signal: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(slurp(log).find("consumer_name \"slot-0\" (group workers of " + stream +
                            ") is in use by a live process (client "),
            std::string::npos)
      << slurp(log);
  // The client id may change (the renewals come from the scheduler's connection), and the time
  // of the write does; the token of the first process's run must not.
  EXPECT_EQ(run_token(client.cmd({"GET", key}).view().str()), run_token(held_by))
      << "the refused process took the name";
  // The first goes on, and another name runs beside it.
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string one = producer.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":done").count(one) == 1; }));
  ConsumerOptions o{.connection = {.url = server.url()}, .stream = stream, .consumer_name = "slot-1"};
  o.stop_on_signals = false;
  {
    RunningConsumer other(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
    const std::string other_key = detail::live_key(stream, "workers", "slot-1");
    ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", other_key}) == 1; }));
    other.stop();
    EXPECT_EQ(client.integer({"EXISTS", other_key}), 0) << "a clean stop frees the name";
  }
  // The same name on another queue is another consumer.
  o.consumer_name = "slot-0";
  o.stream = stream + "-other";
  RunningConsumer elsewhere(o, [](Consumer& c) { c.on("work", [](const Task&) {}); });
  ASSERT_TRUE(wait_until([&] {
    return client.integer({"EXISTS", detail::live_key(o.stream, "workers", "slot-0")}) == 1;
  }));
  EXPECT_FALSE(elsewhere.finished());
}

// A restart after a crash still works at once: the holder's connection is gone, so the new
// process takes the name, and replays its own pending entry long before claim_min_idle.
TEST(Reliability, ARestartAfterAKillTakesTheConsumerNameAtOnce) {
  NamedHolder h;
  ASSERT_TRUE(h.started());
  const std::string before(h.client.cmd({"GET", h.key}).view().str());
  h.first.kill9();
  const std::string log = h.server.dir() + "/again.log";
  WorkerProcess again(h.args, log);
  ASSERT_TRUE(wait_until([&] { return hash(h.client, h.stream + ":started").at(h.held) == 2; }, 10s))
      << "the restart did not run its own pending entry: " << slurp(log);
  const std::string after(h.client.cmd({"GET", h.key}).view().str());
  EXPECT_NE(run_token(after), run_token(before)) << "another run's token";
  EXPECT_NE(slurp(log).find("is gone; taking it over"), std::string::npos) << slurp(log);
  EXPECT_FALSE(again.died());
}

// Redis restarts (kill -9, its data kept) after a worker holding a name was killed: client ids
// start again from 1, and the id the name records now belongs to another client, one that
// connected after the name was written. The restarted worker takes its name at once all the
// same. (Without that rule, in name_lock.cpp, the other client passes for the live holder and
// the worker is refused its name: "is in use by a live process (client 8 ...)".)
TEST(Reliability, AfterARedisRestartTheRecordedClientIdOfAnotherClientDoesNotHoldTheName) {
  NamedHolder h(RedisServerOptions{.appendonly = true});
  ASSERT_TRUE(h.started());
  const std::string recorded(h.client.cmd({"GET", h.key}).view().str());
  const std::string holder_id = recorded.substr(0, recorded.find(' '));
  h.first.kill9();
  // (A client connected within a second of the name's write could be its holder: the restart
  // comes later than that.)
  std::this_thread::sleep_for(1500ms);
  h.server.kill9();
  h.server.restart();
  // Clients connect until one has the recorded id.
  std::vector<std::unique_ptr<Client>> others;
  for (;;) {
    others.push_back(std::make_unique<Client>(h.server.url()));
    const std::int64_t id = others.back()->integer({"CLIENT", "ID"});
    if (std::to_string(id) == holder_id) break;
    ASSERT_LT(id, std::stoll(holder_id)) << "the recorded id " << holder_id << " was passed";
  }
  Client& reader = *others.front();  // (the first client went with the old server)
  ASSERT_EQ(std::string(reader.cmd({"GET", h.key}).view().str()), recorded)
      << "the name did not survive the restart";
  const std::string log = h.server.dir() + "/again.log";
  WorkerProcess again(h.args, log);
  ASSERT_TRUE(wait_until([&] { return hash(reader, h.stream + ":started").at(h.held) == 2; }, 10s))
      << "the restart did not run its own pending entry: " << slurp(log);
  EXPECT_NE(slurp(log).find("is gone; taking it over"), std::string::npos) << slurp(log);
  EXPECT_FALSE(again.died());
}

/// This machine's host name, the stem of the names chosen for consumers given none.
std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// A worker given no consumer_name goes by the lowest "<host>-<n>" no live process holds, so a
// worker restarted after a kill -9, with nothing configured, takes its predecessor's name and
// replays its pending entry at once, long before claim_min_idle (10 minutes here). (Before,
// an empty name was "<host>-<pid>-<random>", and the restart ran nothing for claim_min_idle.)
TEST(Reliability, AWorkerGivenNoNameIsRestartedUnderItsNameAndResumesAtOnce) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string key = detail::live_key(stream, "workers", this_host() + "-1");
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  const std::string held = producer.enqueue("hang", nlohmann::json{{"ms", 600000}});
  const std::vector<std::string> args{STREAMQ_TEST_WORKER,  server.url(),         stream, "",
                                      "min_idle_ms=600000", "heartbeat_ms=200000"};
  WorkerProcess first(args);
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":started").count(held) == 1; }));
  EXPECT_EQ(client.integer({"EXISTS", key}), 1) << "the first worker is " << this_host() << "-1";
  first.kill9();
  const std::string log = server.dir() + "/again.log";
  WorkerProcess again(args, log);
  ASSERT_TRUE(wait_until([&] { return hash(client, stream + ":started").at(held) == 2; }, 10s))
      << "the restart did not run its predecessor's pending entry: " << slurp(log);
  EXPECT_NE(slurp(log).find("consumer " + this_host() + "-1 running on"), std::string::npos) << slurp(log);
  EXPECT_FALSE(again.died());
}

// Consumers given no name take the lowest free "<host>-<n>": the second live one the next, a
// clean stop frees its name for the next start. name() is "" until run() has chosen.
TEST(ConsumerName, ConsumersGivenNoNameTakeTheLowestFreeNameOfTheirHost) {
  RedisServer server;
  const std::string stream = unique_key();
  ConsumerOptions o{.connection = {.url = server.url()}, .stream = stream, .stop_on_signals = false};
  const auto noop = [](Consumer& c) { c.on("work", [](const Task&) {}); };
  const auto named = [](RunningConsumer& c) {
    EXPECT_TRUE(wait_until([&] { return !c.consumer().name().empty() || c.finished(); }));
    return c.consumer().name();
  };
  Consumer not_started(o);
  EXPECT_EQ(not_started.name(), "");
  auto first = std::make_unique<RunningConsumer>(o, noop);
  EXPECT_EQ(named(*first), this_host() + "-1");
  RunningConsumer second(o, noop);
  EXPECT_EQ(named(second), this_host() + "-2");
  first->stop();
  first.reset();
  RunningConsumer third(o, noop);
  EXPECT_EQ(named(third), this_host() + "-1") << "the name freed by a clean stop";
  // A name given is kept, whatever is free.
  o.consumer_name = "slot-7";
  RunningConsumer given(o, noop);
  EXPECT_EQ(given.consumer().name(), "slot-7");
  // Every partition of a partitioned queue goes by the one name.
  ConsumerOptions p{.connection = {.url = server.url()},
                    .stream = unique_key(),
                    .concurrency = 4,
                    .partitions = 3,
                    .stop_on_signals = false};
  Producer producer({.connection = {.url = server.url()}, .stream = p.stream, .partitions = 3});
  RunningConsumer partitioned(p, noop);
  EXPECT_EQ(named(partitioned), this_host() + "-1") << "another queue's names are its own";
  for (int i = 0; i < 30; ++i) producer.enqueue("work", "{}");
  Client client(server.url());
  ASSERT_TRUE(wait_until([&] { return partitioned.consumer().metrics().done == 30; }));
  for (int i = 0; i < 3; ++i) {
    const detail::Reply r =
        client.cmd({"XINFO", "CONSUMERS", detail::partition_stream(p.stream, 3, i), "workers"});
    ASSERT_EQ(r.view().size(), 1u) << "partition " << i;
    EXPECT_EQ(r.view()[0][1].str(), this_host() + "-1") << "partition " << i;
  }
}

/// How many CLIENT LIST commands the server ran since its last CONFIG RESETSTAT, or nullopt on a
/// server that counts CLIENT's subcommands together (before Redis 7).
std::optional<std::int64_t> client_list_calls(Client& client) {
  const std::string info(client.cmd({"INFO", "commandstats"}).view().str());
  if (info.find("cmdstat_client|") == std::string::npos) return std::nullopt;
  const std::string stat = "cmdstat_client|list:calls=";
  const std::size_t at = info.find(stat);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + stat.size()));
}

// The eighth consumer given no name, with seven live ones of its host holding the names below
// its own, finds its name in one pass over them: it looks at the holders all at once (a few
// CLIENT LISTs, the looks of one liveness check), not one holder after another (three looks,
// 200 ms, for each: the 32nd worker of a host took six seconds to start).
TEST(ConsumerName, TheEighthConsumerGivenNoNameLooksAtTheNamesBelowItsOwnAtOnce) {
  RedisServer server;
  Client client(server.url());
  ConsumerOptions o{.connection = {.url = server.url()}, .stream = unique_key(), .stop_on_signals = false};
  const auto noop = [](Consumer& c) { c.on("work", [](const Task&) {}); };
  const auto named = [](RunningConsumer& c) {
    EXPECT_TRUE(wait_until([&] { return !c.consumer().name().empty() || c.finished(); }));
    return c.consumer().name();
  };
  std::vector<std::unique_ptr<RunningConsumer>> earlier;
  for (int n = 1; n <= 7; ++n) {
    earlier.push_back(std::make_unique<RunningConsumer>(o, noop));
    ASSERT_EQ(named(*earlier.back()), this_host() + "-" + std::to_string(n));
  }
  client.cmd({"CONFIG", "RESETSTAT"}).view().check();
  RunningConsumer eighth(o, noop);
  ASSERT_EQ(named(eighth), this_host() + "-8");
  const std::optional<std::int64_t> lists = client_list_calls(client);
  if (!lists) GTEST_SKIP() << "this server does not count CLIENT LIST apart from CLIENT's other subcommands";
  EXPECT_GE(*lists, 1) << "the holders below its name were looked at";
  EXPECT_LE(*lists, 3) << "CLIENT LIST once per holder below its name, not once per look";
}

// A holder stopped (SIGSTOP) for longer than claim_min_idle cannot renew its name: it expires,
// and a new process under it runs. When the old one goes on, its next renewal finds the name
// taken: it stops, and run() throws ConfigError (status 3), so the two never share the name.
TEST(Reliability, AConsumerWhoseNameWasTakenWhileItWasStoppedStops) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string key = detail::live_key(stream, "workers", "slot-0");
  const std::string log = server.dir() + "/zombie.log";
  WorkerProcess zombie({STREAMQ_TEST_WORKER, server.url(), stream, "slot-0", "min_idle_ms=1000",
                        "heartbeat_ms=200", "reclaim_ms=200"},
                       log);
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", key}) == 1; }));
  zombie.signal(SIGSTOP);
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"EXISTS", key}) == 0;
      },
      5s))
      << "the name did not expire";
  // The successor's own name lasts 10 s unrenewed: a slow moment of this machine (a sanitizer
  // build) must not let the old process take it back. Only the old one's 1 s had to expire.
  ConsumerOptions o{.connection = {.url = server.url()},
                    .stream = stream,
                    .consumer_name = "slot-0",
                    .claim_min_idle = 10s,
                    .reclaim_interval = 1s,
                    .heartbeat_interval = 1s,
                    .stop_on_signals = false};
  std::atomic<int> done{0};
  RunningConsumer successor(o, [&](Consumer& c) { c.on("work", [&](const Task&) { ++done; }); });
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", key}) == 1; }));
  const std::string holder(client.cmd({"GET", key}).view().str());
  zombie.signal(SIGCONT);
  const int status = zombie.wait_exit(10s);
  ASSERT_TRUE(WIFEXITED(status)) << "still running, or killed by a signal: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(slurp(log).find("was taken by another process (client "), std::string::npos) << slurp(log);
  const std::string now_held(client.cmd({"GET", key}).view().str());
  EXPECT_EQ(run_token(now_held), run_token(holder))
      << "the old process's stop freed or took the new one's name";
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  producer.enqueue("work", "{}");
  ASSERT_TRUE(wait_until([&] { return done.load() == 1; }));
  EXPECT_FALSE(successor.finished());
}

}  // namespace
}  // namespace streamq::test
