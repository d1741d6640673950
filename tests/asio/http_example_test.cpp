// SPDX-License-Identifier: MIT
// examples/asio_http.cpp, run: its "202 + poll status" and "wait up to N s for the result"
// endpoints, answered by the worker it runs beside them.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <asio.hpp>
#include <nlohmann/json.hpp>

#include "redis_server.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

struct HttpReply {
  int status = 0;
  nlohmann::json body;
};

/// One request on a connection of its own (the example closes each after its answer).
HttpReply http(int port, const std::string& method, const std::string& target, const std::string& body = {}) {
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  const std::string request = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  asio::write(socket, asio::buffer(request));
  std::string reply;
  asio::error_code ec;
  asio::read(socket, asio::dynamic_buffer(reply), ec);  // to the end: the server closes
  HttpReply r;
  r.status = std::stoi(reply.substr(9, 3));
  r.body = nlohmann::json::parse(reply.substr(reply.find("\r\n\r\n") + 4));
  return r;
}

class HttpExample : public ::testing::Test {
 protected:
  RedisServer server;
  int port = free_port();
  pid_t pid = -1;

  void SetUp() override {
    const std::string port_text = std::to_string(port);
    const std::string url = server.url();
    std::vector<std::string> args{STREAMQ_ASIO_HTTP, "--url",   url,        "--stream", unique_key(),
                                  "--port",          port_text, "--worker", "1"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid = spawn_child(STREAMQ_ASIO_HTTP, argv);
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(wait_until([&] {
      try {
        asio::io_context io;
        asio::ip::tcp::socket s(io);
        s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
        return true;
      } catch (const std::exception&) {
        return false;
      }
    }));
  }
  void TearDown() override {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
};

TEST_F(HttpExample, WaitsForTheResultOrAnswers202AndAPollableStatus) {
  const HttpReply waited = http(port, "POST", "/tasks/add?wait=10", R"({"a":2,"b":40})");
  EXPECT_EQ(waited.status, 200) << waited.body;
  EXPECT_EQ(waited.body["state"], "done") << waited.body;
  EXPECT_EQ(waited.body["result"], 42) << waited.body;

  const HttpReply accepted = http(port, "POST", "/tasks/add", R"({"a":1,"b":2})");
  ASSERT_EQ(accepted.status, 202) << accepted.body;
  const std::string id = accepted.body["id"];
  HttpReply polled;
  ASSERT_TRUE(wait_until([&] {
    polled = http(port, "GET", "/tasks/" + id);
    return polled.status == 200 && polled.body["state"] == "done";
  })) << polled.body;
  EXPECT_EQ(polled.body["result"], 3);

  EXPECT_EQ(http(port, "GET", "/tasks/no-such-task").status, 404);
  EXPECT_EQ(http(port, "POST", "/tasks/add", "{not json").status, 400);
  // A task slower than the wait: the wait ends at its timeout, with 202 and the id to poll.
  const HttpReply late = http(port, "POST", "/tasks/slow?wait=1", R"({"ms":3000})");
  EXPECT_EQ(late.status, 202) << late.body;
  EXPECT_TRUE(late.body.contains("id")) << late.body;
  // A type no worker knows: dead-lettered at once, and the wait answers with that record.
  const HttpReply dead = http(port, "POST", "/tasks/nobody?wait=5", "{}");
  EXPECT_EQ(dead.status, 200) << dead.body;
  EXPECT_EQ(dead.body["state"], "dead") << dead.body;
}

}  // namespace
}  // namespace streamq::test
