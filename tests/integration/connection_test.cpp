// SPDX-License-Identifier: MIT
// The connection layer as a Producer sees it: errors, session set-up, reconnects, SIGPIPE.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// A loopback listener that never answers. With `fill_backlog` its accept queue is full as
/// well, so the kernel drops new connection attempts (their SYN) and connect() hangs;
/// otherwise connections are accepted by the kernel and then nothing is ever read or written.
class SilentListener {
 public:
  explicit SilentListener(bool fill_backlog) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(fd_, fill_backlog ? 0 : 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("cannot listen");
    }
    port_ = ntohs(addr.sin_port);
    if (fill_backlog) {
      filler_ = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(filler_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        throw std::runtime_error("cannot fill the backlog");
      }
    }
  }
  ~SilentListener() {
    if (filler_ >= 0) close(filler_);
    close(fd_);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int filler_ = -1;
  int port_ = 0;
};

/// How long enqueue took to throw `E`.
template <class E>
std::chrono::milliseconds time_to_throw(Producer& producer) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(producer.enqueue("t", "{}"), E);
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

TEST(Connection, RefusedConnectionFailsAtOnce) {
  // A port nobody listens on: take a server's port, then stop it.
  int port = 0;
  {
    RedisServer server;
    port = server.port();
  }
  Producer producer(
      {.connection = {.url = "redis://127.0.0.1:" + std::to_string(port), .connect_timeout = 10s}});
  // A refusal is an answer: no waiting for the 10 s connect timeout.
  EXPECT_LT(time_to_throw<ConnectionError>(producer), 5s);
}

TEST(Connection, ConnectTimeoutBoundsAConnectThatIsNeverAnswered) {
  SilentListener listener(/*fill_backlog=*/true);
  Producer producer({.connection = {.url = listener.url(), .connect_timeout = 300ms, .socket_timeout = 20s}});
  const auto took = time_to_throw<TimeoutError>(producer);
  EXPECT_GE(took, 250ms);  // it waited for the connect timeout ...
  EXPECT_LT(took, 10s);    // ... not for the socket timeout
}

TEST(Connection, ConnectTimeoutBoundsAHandshakeThatIsNeverAnswered) {
  SilentListener listener(/*fill_backlog=*/false);  // connects, then AUTH/SETNAME get no reply
  Producer producer({.connection = {.url = listener.url(), .connect_timeout = 300ms, .socket_timeout = 20s}});
  const auto took = time_to_throw<TimeoutError>(producer);
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 10s);
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
  Producer user(
      {.connection = {.url = "redis://producer:p%40ss%20word@127.0.0.1:" + port}, .stream = unique_key()});
  EXPECT_EQ(user.enqueue("t", "{}").size(), 36u);
  EXPECT_EQ(admin.integer({"XLEN", unique_key()}), 1);
}

TEST(Connection, SelectsDatabaseAndSetsClientName) {
  RedisServer server;
  Producer producer(
      {.connection = {.url = server.url() + "/3", .client_name = "orders-api"}, .stream = unique_key()});
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
  EXPECT_TRUE(succeeds_eventually([&] { producer.enqueue("t", "{}"); }));
  Client c(server.url());
  EXPECT_GE(c.integer({"XLEN", unique_key()}), 2);
}

TEST(Connection, WriteToKilledServerDoesNotRaiseSigpipe) {
  RedisServer server;
  Producer producer(
      {.connection = {.url = server.url()}, .stream = unique_key(), .max_payload_bytes = 16u << 20});
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
  Producer producer({.connection = {.url = server.url(), .socket_timeout = 300ms}, .stream = unique_key()});
  producer.enqueue("t", "{}");
  server.pause();
  EXPECT_THROW(producer.enqueue("t", "{}"), TimeoutError);
  server.resume();
  EXPECT_TRUE(succeeds_eventually([&] { producer.enqueue("t", "{}"); }));
}

}  // namespace
}  // namespace streamq::test
