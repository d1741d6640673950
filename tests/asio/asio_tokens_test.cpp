// SPDX-License-Identifier: MIT
// The asio component with completion tokens other than coroutines' (asio::use_future, a
// callback): built wherever asio is, also where the compiler gives asio no coroutines (clang 14
// with libstdc++).
#include <exception>
#include <future>
#include <string>

#include <gtest/gtest.h>
#include <asio/use_future.hpp>

#include <streamq/asio.hpp>
#include <streamq/streamq.hpp>

#include "redis_server.hpp"

namespace streamq::test {
namespace {

class AsioTokensTest : public ::testing::Test {
 protected:
  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();
  Producer producer{{.connection = {.url = server.url()}, .stream = stream, .max_len = 100000}};
};

TEST_F(AsioTokensTest, AFutureAndACallbackAreAnsweredAsTheBlockingCalls) {
  std::future<std::string> f = producer.async_enqueue("job", "{}", asio::use_future);
  EXPECT_EQ(f.get().size(), 36u);
  std::promise<std::string> called;
  producer.async_enqueue("job", "{}", [&](std::exception_ptr e, std::string id) {
    if (e) return called.set_exception(e);
    called.set_value(std::move(id));
  });
  EXPECT_EQ(called.get_future().get().size(), 36u);
  EXPECT_EQ(client.integer({"XLEN", stream}), 2);
  std::future<std::string> opened =
      producer.async_open_batch(BatchOptions{.batch_id = "tokens"}, asio::use_future);
  EXPECT_EQ(opened.get(), "tokens");
  EXPECT_TRUE(producer.async_close_batch("tokens", asio::use_future).get());
  EXPECT_THROW(producer.async_close_batch("no-such-batch", asio::use_future).get(), BatchClosedError);
  std::future<FlowIds> flow = producer.async_enqueue_flow(
      chain({{.task_type = "a", .payload = "{}"}, {.task_type = "b", .payload = "{}"}}), asio::use_future);
  EXPECT_EQ(flow.get().children.size(), 1u);
  EXPECT_EQ(client.integer({"XLEN", stream}), 3) << "the chain's first task";
}

}  // namespace
}  // namespace streamq::test
