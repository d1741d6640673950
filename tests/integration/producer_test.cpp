// SPDX-License-Identifier: MIT
#include <atomic>
#include <chrono>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis/scripts.hpp"
#include "redis_server.hpp"
#include "typed_payload.hpp"
#include "wire/codec.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class ProducerTest : public ::testing::Test {
 protected:
  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();

  ProducerOptions options() const { return {.connection = {.url = server.url()}, .stream = stream}; }
};

TEST_F(ProducerTest, WritesTheSeedWireFormat) {
  Producer producer(options());
  const auto before = std::chrono::system_clock::now();
  const std::string id =
      producer.enqueue("send_email", nlohmann::json{{"to", "user@example.com"}, {"order_id", 12345}});
  const auto after = std::chrono::system_clock::now();

  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  const auto& f = entries[0].second;
  ASSERT_EQ(f.size(), 6u);
  const char* names[] = {"task_id", "task_type", "payload", "created_at", "max_retries", "retry_count"};
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(f[i].first, names[i]);
  EXPECT_EQ(f[0].second, id);
  EXPECT_TRUE(std::regex_match(
      id, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
  EXPECT_EQ(f[1].second, "send_email");
  EXPECT_EQ(nlohmann::json::parse(f[2].second),
            (nlohmann::json{{"to", "user@example.com"}, {"order_id", 12345}}));
  EXPECT_TRUE(std::regex_match(f[3].second, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})")))
      << f[3].second;
  const auto created = detail::parse_timestamp(f[3].second);
  ASSERT_TRUE(created.has_value());
  EXPECT_GE(*created, std::chrono::time_point_cast<std::chrono::microseconds>(before) - 1us);
  EXPECT_LE(*created, after);
  EXPECT_EQ(f[4].second, "3");
  EXPECT_EQ(f[5].second, "0");
}

TEST_F(ProducerTest, CallerIdMaxRetriesAndExtraFieldsRoundTrip) {
  Producer producer(options());
  const std::string id =
      producer.enqueue("reindex", "[1,2,3]",
                       {.task_id = "order-42", .max_retries = 0, .extra_fields = {{"priority", "high"}}});
  EXPECT_EQ(id, "order-42");
  const auto f = client.xrange(stream).at(0).second;
  EXPECT_EQ(Client::get(f, "task_id"), "order-42");
  EXPECT_EQ(Client::get(f, "max_retries"), "0");
  EXPECT_EQ(Client::get(f, "payload"), "[1,2,3]");
  EXPECT_EQ(Client::get(f, "priority"), "high");
  EXPECT_THROW(producer.enqueue("t", "{}", {.extra_fields = {{"retry_count", "9"}}}), ConfigError);
  EXPECT_THROW(producer.enqueue("", "{}"), ConfigError);
  EXPECT_THROW(producer.enqueue("t", "{}", {.max_retries = -1}), ConfigError);
}

struct NoJson {};
void to_json(nlohmann::json&, const NoJson&) { throw std::runtime_error("cannot"); }

// Each overload of enqueue stores what its payload means: JSON text as given (a string literal
// is never turned into a JSON string), JSON values and braced lists serialised, typed values
// through to_json; TaskSpec takes the same.
TEST_F(ProducerTest, EveryPayloadFormIsStoredAsItsJson) {
  Producer producer(options());
  const std::string text = R"({ "a" : 1 })";
  producer.enqueue("t", R"({ "a" : 1 })");
  producer.enqueue("t", text);
  producer.enqueue("t", std::string_view(text));
  producer.enqueue("t", nlohmann::json{{"a", 1}});
  producer.enqueue("t", {{"a", 1}});
  producer.enqueue("t", {{"a", 1}}, {.max_retries = 1});
  producer.enqueue("t", Resize{.image = "cat.png", .width = 640});
  const nlohmann::json value{{"b", 2}};
  producer.enqueue_batch(
      {{"t", value}, {.task_type = "t", .payload = {{"c", 3}}}, {"t", Resize{"x", 1}}, {"t", "[1]"}});
  const auto entries = client.xrange(stream);
  std::vector<std::string> payloads;
  for (const auto& [id, fields] : entries) payloads.push_back(Client::get(fields, "payload"));
  EXPECT_EQ(payloads, (std::vector<std::string>{text, text, text, R"({"a":1})", R"({"a":1})", R"({"a":1})",
                                                R"({"image":"cat.png","width":640})", R"({"b":2})",
                                                R"({"c":3})", R"({"image":"x","width":1})", "[1]"}));
  EXPECT_EQ(Client::get(entries[5].second, "max_retries"), "1");
}

TEST_F(ProducerTest, APayloadThatCannotBecomeJsonIsAPayloadErrorAndNothingIsSent) {
  Producer producer(options());
  EXPECT_THROW(producer.enqueue("t", NoJson{}), PayloadError);
  EXPECT_THROW(producer.enqueue("t", nlohmann::json{{"name", "\xff"}}), PayloadError);  // not UTF-8
  EXPECT_THROW(producer.enqueue_batch({{"t", "{}"}, {"t", ""}}), PayloadError);
  EXPECT_EQ(client.integer({"EXISTS", stream}), 0);
}

TEST_F(ProducerTest, BinaryAndHostileBytesRoundTripExactly) {
  Producer producer(options());
  const std::string type = std::string("type %s %n\r\n*1\r\n") + '\0' + "end";
  const std::string payload = "\"%s\\r\\n\\u0000 *3\\r\\n$3\"";
  const std::string id = std::string("id with spaces %d\r\n") + '\0';
  producer.enqueue(type, payload, {.task_id = id});
  const auto f = client.xrange(stream).at(0).second;
  EXPECT_EQ(Client::get(f, "task_type"), type);
  EXPECT_EQ(Client::get(f, "payload"), payload);
  EXPECT_EQ(Client::get(f, "task_id"), id);
}

TEST_F(ProducerTest, BatchKeepsOrder) {
  Producer producer(options());
  std::vector<TaskSpec> batch;
  for (int i = 0; i < 1000; ++i) batch.push_back({"n", nlohmann::json{{"i", i}}.dump()});
  const auto ids = producer.enqueue_batch(batch);
  ASSERT_EQ(ids.size(), 1000u);
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(Client::get(entries[i].second, "task_id"), ids[i]);
    EXPECT_EQ(nlohmann::json::parse(Client::get(entries[i].second, "payload"))["i"], i);
  }
  EXPECT_TRUE(producer.enqueue_batch({}).empty());
}

TEST_F(ProducerTest, FullQueueRefusesInsteadOfTrimming) {
  auto o = options();
  o.max_len = 10;
  Producer producer(o);
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(producer.enqueue("t", "{}"));
  EXPECT_THROW(producer.enqueue("t", "{}"), QueueFullError);
  EXPECT_EQ(client.integer({"XLEN", stream}), 10);
  // Every accepted task is still there: nothing was trimmed.
  const auto entries = client.xrange(stream);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Client::get(entries[i].second, "task_id"), ids[i]);
  // Finished tasks are deleted by the consumer; that frees room.
  client.cmd({"XDEL", stream, entries[0].first});
  EXPECT_NO_THROW(producer.enqueue("t", "{}"));
}

TEST_F(ProducerTest, FullQueueRefusesBatchChunksWhole) {
  auto o = options();
  o.max_len = 300;
  Producer producer(o);
  std::vector<TaskSpec> batch(600, TaskSpec{"t", "{}"});
  try {
    producer.enqueue_batch(batch);
    FAIL() << "no QueueFullError";
  } catch (const QueueFullError& e) {
    // Chunks of 64: four fit (256); 320 would exceed 300, so the fifth is refused, and every
    // chunk behind it too, although the last one (24 tasks) would fit: what was written is a
    // prefix. batch_ids() says exactly which went in.
    ASSERT_EQ(e.batch_ids().size(), 600u);
    EXPECT_EQ(e.accepted(), 256u);
    for (std::size_t i = 0; i < 600; ++i) EXPECT_EQ(e.batch_ids()[i].empty(), i >= 256) << i;
    const auto entries = client.xrange(stream);
    ASSERT_EQ(entries.size(), 256u);
    for (std::size_t i = 0; i < 256; ++i)
      EXPECT_EQ(Client::get(entries[i].second, "task_id"), e.batch_ids()[i]);
  }
}

// The report of issue 8: 150 tasks into a queue capped at 100 wrote 64, refused 64, then wrote
// the last 22 anyway, and the error did not say which.
TEST_F(ProducerTest, RefusedBatchWritesAPrefixAndSaysWhich) {
  auto o = options();
  o.max_len = 100;
  Producer producer(o);
  std::vector<TaskSpec> batch;
  for (int i = 0; i < 150; ++i) batch.push_back({"t", nlohmann::json{{"i", i}}});
  try {
    producer.enqueue_batch(batch);
    FAIL() << "no QueueFullError";
  } catch (const QueueFullError& e) {
    EXPECT_EQ(e.accepted(), 64u);
    const std::string what = e.what();
    EXPECT_NE(
        what.find("queue full: wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and wrote "
                  "nothing after the first refused one: QUEUEFULL"),
        std::string::npos)
        << what;
    const auto entries = client.xrange(stream);
    ASSERT_EQ(entries.size(), 64u);
    for (std::size_t i = 0; i < 64; ++i) {
      EXPECT_EQ(Client::get(entries[i].second, "payload"), nlohmann::json({{"i", i}}).dump());
      EXPECT_EQ(Client::get(entries[i].second, "task_id"), e.batch_ids()[i]);
    }
  }
  // The refusal mark of that batch expires on its own; a later batch is not refused by it.
  const detail::Reply keys = client.cmd({"KEYS", stream + ":batch:*"});
  ASSERT_EQ(keys.view().size(), 1u);
  const std::string mark(keys.view()[0].str());
  EXPECT_GT(client.integer({"PTTL", mark}), 0);
  client.cmd({"DEL", stream});
  EXPECT_EQ(producer.enqueue_batch(std::vector<TaskSpec>(100, TaskSpec{"t", "{}"})).size(), 100u);
}

TEST_F(ProducerTest, BatchRefusedAtTheFirstChunkWritesNothing) {
  auto o = options();
  o.max_len = 10;
  Producer producer(o);
  try {
    producer.enqueue_batch(std::vector<TaskSpec>(70, TaskSpec{"t", "{}"}));
    FAIL() << "no QueueFullError";
  } catch (const QueueFullError& e) {
    EXPECT_EQ(e.accepted(), 0u);
    EXPECT_EQ(std::string(e.what()).rfind(
                  "queue full: wrote 0 of 70 tasks; refused 70 (indices 0-69): QUEUEFULL", 0),
              0u)
        << e.what();
  }
  EXPECT_EQ(client.integer({"XLEN", stream}), 0);
}

TEST_F(ProducerTest, TrimPolicyBehavesLikeTheSeed) {
  auto o = options();
  o.max_len = 100;
  o.overflow = Overflow::trim_oldest;
  Producer producer(o);
  for (int i = 0; i < 1000; ++i) producer.enqueue("t", "{}");
  const auto len = client.integer({"XLEN", stream});
  EXPECT_GE(len, 100);
  EXPECT_LT(len, 300);  // MAXLEN ~ trims whole nodes (100 entries each by default)
  std::vector<TaskSpec> batch(500, TaskSpec{"t", "{}"});
  EXPECT_EQ(producer.enqueue_batch(batch).size(), 500u);
  EXPECT_LT(client.integer({"XLEN", stream}), 300);
}

TEST_F(ProducerTest, PayloadGuardsRefuseBeforeSending) {
  Producer producer(options());
  const std::string too_big = "\"" + std::string(1u << 20, 'x') + "\"";
  EXPECT_THROW(producer.enqueue("t", too_big), PayloadError);
  EXPECT_THROW(producer.enqueue("t", "{not json"), PayloadError);
  EXPECT_THROW(producer.enqueue("t", std::string(65, '[') + std::string(65, ']')), PayloadError);
  EXPECT_THROW(producer.enqueue_batch({{"t", "{}"}, {"t", "nope"}}), PayloadError);
  EXPECT_EQ(client.integer({"EXISTS", stream}), 0);  // nothing at all was written
  EXPECT_NO_THROW(producer.enqueue("t", std::string(64, '[') + std::string(64, ']')));
}

TEST_F(ProducerTest, WrongTypeKeyGivesReplyError) {
  client.cmd({"SET", stream, "not a stream"});
  for (Overflow policy : {Overflow::reject, Overflow::trim_oldest}) {
    auto o = options();
    o.overflow = policy;
    Producer producer(o);
    try {
      producer.enqueue("t", "{}");
      FAIL() << "no error for a string key";
    } catch (const ReplyError& e) {
      EXPECT_EQ(e.prefix(), "WRONGTYPE") << e.what();
    }
  }
}

TEST_F(ProducerTest, RedisOutOfMemoryGivesReplyError) {
  client.cmd({"CONFIG", "SET", "maxmemory", "1"});
  Producer producer(options());
  try {
    producer.enqueue("t", "{}");
    FAIL() << "no OOM error";
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.prefix(), "OOM") << e.what();
  }
  client.cmd({"CONFIG", "SET", "maxmemory", "0"});
  EXPECT_NO_THROW(producer.enqueue("t", "{}"));
}

TEST_F(ProducerTest, SurvivesScriptCacheFlush) {
  Producer producer(options());
  producer.enqueue("t", "{}");
  client.cmd({"SCRIPT", "FLUSH"});
  EXPECT_NO_THROW(producer.enqueue("t", "{}"));
  EXPECT_NO_THROW(producer.enqueue_batch({{"t", "{}"}, {"t", "{}"}}));
  EXPECT_EQ(client.integer({"XLEN", stream}), 4);
}

// A script cache emptied under a batch (a failover, SCRIPT FLUSH) while another client caches
// the script again can refuse a chunk (NOSCRIPT) and run the ones behind it: they must not be
// written before it. Here a second client flushes and reloads the cache in a loop under
// batches of four chunks; the stream must hold every batch whole, in order.
TEST_F(ProducerTest, ABatchStaysInOrderWhenTheScriptCacheEmptiesUnderIt) {
  std::atomic<bool> done{false};
  std::thread flusher([&] {
    Client c(server.url());
    const std::string source(detail::script_source(detail::ScriptId::enqueue));
    while (!done) {
      c.cmd({"SCRIPT", "FLUSH"});
      c.cmd({"SCRIPT", "LOAD", source});
    }
  });
  auto o = options();
  o.max_len = 1000000;
  Producer producer(o);
  std::vector<std::string> sent;
  std::string error;
  try {
    for (int b = 0; b < 100; ++b) {
      std::vector<TaskSpec> batch;
      for (int i = 0; i < 4 * 64; ++i) batch.push_back({"n", "{}"});
      const auto ids = producer.enqueue_batch(batch);
      sent.insert(sent.end(), ids.begin(), ids.end());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  done = true;
  flusher.join();
  ASSERT_EQ(error, "");
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), sent.size());
  std::size_t out_of_order = 0;
  for (std::size_t i = 0; i < sent.size(); ++i)
    out_of_order += Client::get(entries[i].second, "task_id") != sent[i];
  EXPECT_EQ(out_of_order, 0u);
}

}  // namespace
}  // namespace streamq::test
