// SPDX-License-Identifier: MIT
// The connection layer as a Producer sees it: errors, session set-up, reconnects, SIGPIPE.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST(Connection, ServerDownGivesConnectionErrorWithinTimeout) {
  // A port nobody listens on: take a server's port, then stop it.
  int port = 0;
  {
    RedisServer server;
    port = server.port();
  }
  Producer producer({.connection = {.url = "redis://127.0.0.1:" + std::to_string(port),
                                    .connect_timeout = 500ms}});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(producer.enqueue("t", "{}"), ConnectionError);
  // Not a timing benchmark: "no hang" means far below the 10 s test deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Connection, PasswordAndAclUser) {
  RedisServer server({.extra = {"--requirepass", "s3cret"}});
  Client admin("redis://:s3cret@127.0.0.1:" + std::to_string(server.port()));
  admin.cmd({"ACL", "SETUSER", "producer", "on", ">p@ss word", "~*", "+@all"}).view().check();
  const std::string port = std::to_string(server.port());

  Producer wrong({.connection = {.url = "redis://:nope@127.0.0.1:" + port}});
  try {
    wrong.enqueue("t", "{}");
    FAIL() << "a wrong password was accepted";
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.prefix(), "WRONGPASS");
  }

  Producer none({.connection = {.url = "redis://127.0.0.1:" + port}, .stream = unique_key()});
  try {
    none.enqueue("t", "{}");
    FAIL() << "an unauthenticated enqueue was accepted";
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.prefix(), "NOAUTH");
  }

  // ACL user with a percent-encoded password ('@' and ' ').
  Producer user({.connection = {.url = "redis://producer:p%40ss%20word@127.0.0.1:" + port},
                 .stream = unique_key()});
  EXPECT_EQ(user.enqueue("t", "{}").size(), 36u);
  EXPECT_EQ(admin.integer({"XLEN", unique_key()}), 1);
}

TEST(Connection, SelectsDatabaseAndSetsClientName) {
  RedisServer server;
  Producer producer({.connection = {.url = server.url() + "/3", .client_name = "orders-api"},
                     .stream = unique_key()});
  producer.enqueue("t", "{}");
  Client db0(server.url());
  Client db3(server.url() + "/3");
  EXPECT_EQ(db0.integer({"EXISTS", unique_key()}), 0);
  EXPECT_EQ(db3.integer({"XLEN", unique_key()}), 1);
  const std::string clients(db0.cmd({"CLIENT", "LIST"}).view().str());
  EXPECT_NE(clients.find("name=orders-api"), std::string::npos) << clients;
}

TEST(Connection, ReconnectsAfterServerRestart) {
  RedisServer server({.appendonly = true});
  Producer producer({.connection = {.url = server.url(), .backoff_base = 10ms, .backoff_max = 100ms},
                     .stream = unique_key()});
  producer.enqueue("t", "{}");
  server.restart();
  // The old socket is dead: the first call may fail (its outcome unknown), later ones succeed.
  bool ok = wait_until([&] {
    try {
      producer.enqueue("t", "{}");
      return true;
    } catch (const ConnectionError&) {
      return false;
    }
  });
  EXPECT_TRUE(ok);
  Client c(server.url());
  EXPECT_GE(c.integer({"XLEN", unique_key()}), 2);
}

TEST(Connection, WriteToKilledServerDoesNotRaiseSigpipe) {
  RedisServer server;
  Producer producer({.connection = {.url = server.url()},
                     .stream = unique_key(),
                     .max_payload_bytes = 16u << 20});
  producer.enqueue("t", "{}");
  server.kill9();
  // 8 MB does not fit in the socket buffer: the write hits the reset connection (EPIPE).
  const std::string big = "\"" + std::string(8u << 20, 'x') + "\"";
  EXPECT_THROW(producer.enqueue("t", big), ConnectionError);
  EXPECT_THROW(producer.enqueue("t", big), ConnectionError);
  // Reaching this line means SIGPIPE did not kill the test process.
}

TEST(Connection, StalledServerGivesTimeoutError) {
  RedisServer server;
  Producer producer({.connection = {.url = server.url(), .socket_timeout = 300ms},
                     .stream = unique_key()});
  producer.enqueue("t", "{}");
  server.pause();
  EXPECT_THROW(producer.enqueue("t", "{}"), TimeoutError);
  server.resume();
  EXPECT_TRUE(wait_until([&] {
    try {
      producer.enqueue("t", "{}");
      return true;
    } catch (const ConnectionError&) {
      return false;
    }
  }));
}

}  // namespace
}  // namespace streamq::test
