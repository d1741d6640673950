// SPDX-License-Identifier: MIT
// Option validation of the public handles (no server: constructors do not connect): bad values
// and durations that would overflow refused with ConfigError, boundary values accepted, consumer
// names, handler registration mistakes, and partition counts and names.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "consumer/options.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "streamq/streamq.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace {

using namespace std::chrono_literals;
using streamq::ConfigError;
using streamq::ConnectionOptions;
using streamq::Consumer;
using streamq::ConsumerOptions;
using streamq::Producer;
using streamq::ProducerOptions;
using streamq::StatsOptions;
using streamq::StatsReader;

// Constructs a Handle from `options`; it must throw ConfigError whose message names `field`.
template <class Handle, class Options>
void expect_refused(Options options, const std::string& field) {
  SCOPED_TRACE(field);
  try {
    Handle handle(std::move(options));
    ADD_FAILURE() << "constructed despite a bad " << field;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

// Mistakes in the connection options, shared by every handle.
struct ConnectionMistake {
  const char* field;
  std::function<void(ConnectionOptions&)> apply;
};

std::vector<ConnectionMistake> connection_mistakes() {
  return {
      {"connection.url", [](ConnectionOptions& c) { c.url = "http://localhost:6379"; }},
      {"connection.url", [](ConnectionOptions& c) { c.url = "redis://localhost:0"; }},
      {"connection.url", [](ConnectionOptions& c) { c.url = ""; }},
      {"connect_timeout", [](ConnectionOptions& c) { c.connect_timeout = 0ms; }},
      {"connect_timeout", [](ConnectionOptions& c) { c.connect_timeout = -5ms; }},
      {"socket_timeout", [](ConnectionOptions& c) { c.socket_timeout = 0ms; }},
      {"backoff_base", [](ConnectionOptions& c) { c.backoff_base = 0ms; }},
      {"backoff_max",
       [](ConnectionOptions& c) {
         c.backoff_base = 100ms;
         c.backoff_max = 99ms;
       }},
      {"client_name", [](ConnectionOptions& c) { c.client_name = "my worker"; }},
      {"client_name", [](ConnectionOptions& c) { c.client_name = "tab\tname"; }},
      {"client_name", [](ConnectionOptions& c) { c.client_name = "caf\xc3\xa9"; }},
  };
}

// ---------------------------------------------------------------- Producer

TEST(ProducerOptions, DefaultsConstructWithoutAServer) {
  EXPECT_NO_THROW(Producer{});
  // Nothing listens on port 1: a constructor that connected would throw here.
  Producer p({.connection = {.url = "redis://127.0.0.1:1"}, .stream = "orders", .max_len = 5});
  EXPECT_EQ(p.options().stream, "orders");
  EXPECT_EQ(p.options().max_len, 5);
  EXPECT_EQ(p.options().connection.url, "redis://127.0.0.1:1");
}

TEST(ProducerOptions, RefusesBadValues) {
  expect_refused<Producer>(ProducerOptions{.stream = ""}, "stream");
  expect_refused<Producer>(ProducerOptions{.max_len = 0}, "max_len");
  expect_refused<Producer>(ProducerOptions{.max_len = -1}, "max_len");
  expect_refused<Producer>(ProducerOptions{.overflow = static_cast<streamq::Overflow>(7)}, "overflow");
  expect_refused<Producer>(ProducerOptions{.max_payload_bytes = 0}, "max_payload_bytes");
  expect_refused<Producer>(ProducerOptions{.max_payload_depth = 0}, "max_payload_depth");
  expect_refused<Producer>(ProducerOptions{.default_max_retries = -1}, "default_max_retries");
  EXPECT_NO_THROW(Producer(ProducerOptions{
      .max_len = 1, .max_payload_bytes = 1, .max_payload_depth = 1, .default_max_retries = 0}));
}

TEST(ProducerOptions, RefusesBadConnectionOptions) {
  for (const auto& m : connection_mistakes()) {
    ProducerOptions o;
    m.apply(o.connection);
    expect_refused<Producer>(std::move(o), m.field);
  }
}

// ---------------------------------------------------------------- StatsReader

TEST(StatsOptions, DefaultsConstructWithoutAServer) {
  EXPECT_NO_THROW(StatsReader{});
  EXPECT_NO_THROW(StatsReader({.connection = {.url = "redis://127.0.0.1:1"}, .group = "g"}));
}

TEST(StatsOptions, RefusesBadValues) {
  expect_refused<StatsReader>(StatsOptions{.stream = ""}, "stream");
  for (const auto& m : connection_mistakes()) {
    StatsOptions o;
    m.apply(o.connection);
    expect_refused<StatsReader>(std::move(o), m.field);
  }
}

// ---------------------------------------------------------------- Consumer

TEST(ConsumerOptions, DefaultsConstructWithoutAServer) {
  EXPECT_NO_THROW(Consumer{});
  EXPECT_NO_THROW(Consumer({.connection = {.url = "redis://127.0.0.1:1"}}));
}

struct ConsumerMistake {
  const char* field;
  std::function<void(ConsumerOptions&)> apply;
};

TEST(ConsumerOptions, RefusesBadValues) {
  const std::vector<ConsumerMistake> mistakes = {
      {"stream", [](ConsumerOptions& o) { o.stream = ""; }},
      {"group", [](ConsumerOptions& o) { o.group = ""; }},
      {"concurrency", [](ConsumerOptions& o) { o.concurrency = 0; }},
      {"concurrency", [](ConsumerOptions& o) { o.concurrency = -2; }},
      {"prefetch",
       [](ConsumerOptions& o) {
         o.concurrency = 8;
         o.prefetch = 7;
       }},
      {"block", [](ConsumerOptions& o) { o.block = 0ms; }},
      // The phantom-delivery guard: the read must not time out while the server still
      // holds the client blocked.
      {"socket_timeout",
       [](ConsumerOptions& o) {
         o.block = 2000ms;
         o.connection.socket_timeout = 2500ms;
       }},
      {"socket_timeout",
       [](ConsumerOptions& o) {
         o.block = 2000ms;
         o.connection.socket_timeout = 2999ms;
       }},
      {"socket_timeout", [](ConsumerOptions& o) { o.connection.socket_timeout = 1000ms; }},
      {"heartbeat_interval", [](ConsumerOptions& o) { o.heartbeat_interval = 0ms; }},
      {"claim_min_idle",
       [](ConsumerOptions& o) {
         o.heartbeat_interval = 5000ms;
         o.claim_min_idle = 14999ms;
       }},
      {"reclaim_interval", [](ConsumerOptions& o) { o.reclaim_interval = 0ms; }},
      {"max_deliveries", [](ConsumerOptions& o) { o.max_deliveries = 1; }},
      {"shutdown_grace", [](ConsumerOptions& o) { o.shutdown_grace = -1ms; }},
      {"max_payload_bytes", [](ConsumerOptions& o) { o.max_payload_bytes = 0; }},
      {"max_payload_depth", [](ConsumerOptions& o) { o.max_payload_depth = 0; }},
      {"default_max_retries", [](ConsumerOptions& o) { o.default_max_retries = -1; }},
      {"idle_consumer_timeout", [](ConsumerOptions& o) { o.idle_consumer_timeout = -1ms; }},
      // A consumer idle for less than claim_min_idle may be a live one between two reads.
      {"idle_consumer_timeout",
       [](ConsumerOptions& o) {
         o.claim_min_idle = 30000ms;
         o.idle_consumer_timeout = 29999ms;
       }},
  };
  for (const auto& m : mistakes) {
    ConsumerOptions o;
    m.apply(o);
    expect_refused<Consumer>(std::move(o), m.field);
  }
}

TEST(ConsumerOptions, RefusesBadConnectionOptions) {
  for (const auto& m : connection_mistakes()) {
    ConsumerOptions o;
    m.apply(o.connection);
    expect_refused<Consumer>(std::move(o), m.field);
  }
}

TEST(ConsumerOptions, BoundaryValuesAreAccepted) {
  // socket_timeout == block + 1 s, claim_min_idle == 3 * heartbeat, prefetch == concurrency,
  // zero grace, a single delivery.
  EXPECT_NO_THROW(Consumer({.connection = {.socket_timeout = 3000ms},
                            .concurrency = 2,
                            .prefetch = 2,
                            .block = 2000ms,
                            .claim_min_idle = 15000ms,
                            .heartbeat_interval = 5000ms,
                            .max_deliveries = 2,
                            .shutdown_grace = 0ms,
                            .default_max_retries = 0,
                            .idle_consumer_timeout = 15000ms}));
  EXPECT_NO_THROW(Consumer({.idle_consumer_timeout = 0ms}));  // off
}

// A duration past about ten years would overflow what it goes into (now + shutdown_grace on the
// steady clock, 3 * heartbeat_interval, block + 1000 ms, a PX): a ConfigError, not a deadline
// that wraps into the past (milliseconds::max() as "forever" detached handlers at once).
TEST(Durations, ValuesThatWouldOverflowAreConfigErrors) {
  constexpr auto forever = std::chrono::milliseconds::max();
  const std::vector<ConsumerMistake> mistakes = {
      {"shutdown_grace", [&](ConsumerOptions& o) { o.shutdown_grace = forever; }},
      {"block",
       [&](ConsumerOptions& o) {
         o.block = forever;
         o.connection.socket_timeout = forever;
       }},
      {"heartbeat_interval",
       [&](ConsumerOptions& o) {
         o.heartbeat_interval = forever;
         o.claim_min_idle = forever;
       }},
      {"claim_min_idle", [&](ConsumerOptions& o) { o.claim_min_idle = forever; }},
      {"reclaim_interval", [&](ConsumerOptions& o) { o.reclaim_interval = forever; }},
      {"idle_consumer_timeout", [&](ConsumerOptions& o) { o.idle_consumer_timeout = forever; }},
      {"forward_interval", [&](ConsumerOptions& o) { o.forward_interval = forever; }},
      {"pause_check_interval", [&](ConsumerOptions& o) { o.pause_check_interval = forever; }},
      {"retry_backoff.cap", [&](ConsumerOptions& o) { o.retry_backoff.cap = forever; }},
      {"connection.socket_timeout", [&](ConsumerOptions& o) { o.connection.socket_timeout = forever; }},
      {"connection.connect_timeout", [&](ConsumerOptions& o) { o.connection.connect_timeout = forever; }},
      {"connection.backoff_max", [&](ConsumerOptions& o) { o.connection.backoff_max = forever; }},
  };
  for (const auto& m : mistakes) {
    ConsumerOptions o;
    m.apply(o);
    expect_refused<Consumer>(std::move(o), m.field);
  }
  Consumer c;
  EXPECT_THROW(c.on("t", [](const streamq::Task&) {}, {.rate = {.limit = 1, .per = forever}}), ConfigError);
  ProducerOptions p{.min_replicas_acked = 1, .replicas_ack_timeout = forever};
  p.connection.socket_timeout = forever;
  expect_refused<Producer>(p, "replicas_ack_timeout");
  expect_refused<streamq::Scheduler>(streamq::SchedulerOptions{.misfire_grace = forever}, "misfire_grace");
  EXPECT_THROW(streamq::Schedule::every(forever), ConfigError);
  // Refused before anything is sent (nothing listens on port 1: a write would be a ConnectionError).
  Producer producer({.connection = {.url = "redis://127.0.0.1:1"}});
  EXPECT_THROW(producer.enqueue("t", "{}", {.unique_for = forever}), ConfigError);
  EXPECT_THROW(producer.enqueue("t", "{}", {.delay = forever}), ConfigError);
  // Ten years is the bound, and taken.
  EXPECT_NO_THROW(Consumer({.shutdown_grace = std::chrono::hours(24 * 365 * 10)}));
}

TEST(ConsumerName, TheUniqueNameIsHostPidAndRandomSuffix) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(streamq::detail::host_name(), host);
  const std::string prefix = std::string(host) + "-" + std::to_string(getpid()) + "-";
  const std::string a = streamq::detail::unique_consumer_name();
  const std::string b = streamq::detail::unique_consumer_name();
  for (const std::string& name : {a, b}) {
    ASSERT_EQ(name.size(), prefix.size() + 8) << name;
    EXPECT_EQ(name.substr(0, prefix.size()), prefix) << name;
    EXPECT_TRUE(std::regex_match(name.substr(prefix.size()), std::regex("[0-9a-f]{8}"))) << name;
  }
  EXPECT_NE(a, b);
  // A consumer given no name has none until run() chooses one (see consumer_name_lock_test).
  EXPECT_EQ(Consumer().name(), "");
}

TEST(ConsumerName, GivenNameIsKept) {
  Consumer c({.consumer_name = "worker-slot-3"});
  EXPECT_EQ(c.name(), "worker-slot-3");
  Consumer moved(std::move(c));
  EXPECT_EQ(moved.name(), "worker-slot-3");
}

TEST(ConsumerHandlers, RegistrationMistakes) {
  Consumer c;
  const Consumer::Handler noop = [](const streamq::Task&) {};
  EXPECT_NO_THROW(c.on("send_email", noop));
  EXPECT_NO_THROW(c.on("resize_image", noop));
  EXPECT_THROW(c.on("", noop), ConfigError);
  EXPECT_THROW(c.on("empty_handler", Consumer::Handler{}), ConfigError);
  try {
    c.on("send_email", noop);
    ADD_FAILURE() << "duplicate handler accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("send_email"), std::string::npos) << e.what();
  }
  // The refused empty handler did not take the name.
  EXPECT_NO_THROW(c.on("empty_handler", noop));
}

}  // namespace

namespace {

TEST(Partitions, CountsAndNamesAreChecked) {
  using streamq::Scheduler;
  using streamq::SchedulerOptions;
  expect_refused<Producer>(ProducerOptions{.partitions = 0}, "partitions must be 1 to 1024");
  expect_refused<Producer>(ProducerOptions{.partitions = 1025}, "partitions must be 1 to 1024");
  expect_refused<Producer>(ProducerOptions{.stream = "{}", .partitions = 2}, "nothing but braces");
  expect_refused<Consumer>(ConsumerOptions{.concurrency = 4, .partitions = -1},
                           "partitions must be 1 to 1024");
  expect_refused<Consumer>(ConsumerOptions{.concurrency = 4, .partitions = 5},
                           "concurrency must be >= partitions");
  expect_refused<StatsReader>(StatsOptions{.partitions = 0}, "partitions must be 1 to 1024");
  expect_refused<Scheduler>(SchedulerOptions{.queue = {.stream = "{}", .partitions = 3}},
                            "nothing but braces");
  // Accepted: one partition of any name, and P partitions of a name with braces in it.
  EXPECT_NO_THROW(Producer(ProducerOptions{.stream = "{}", .partitions = 1}));
  EXPECT_NO_THROW(
      Consumer(ConsumerOptions{.stream = "{orders}", .concurrency = 8, .partitions = 8, .prefetch = 8}));
}

TEST(Partitions, EachPartitionIsItsOwnHashTag) {
  using streamq::detail::partition_stream;
  EXPECT_EQ(partition_stream("orders", 1, 0), "orders");  // one partition: the queue's own name
  EXPECT_EQ(partition_stream("orders", 3, 0), "{orders:0}");
  EXPECT_EQ(partition_stream("{orders}", 3, 2), "{orders:2}");
  EXPECT_EQ(partition_stream("shop:{orders}", 12, 11), "{shop:orders:11}");
  // Every key of a partition is in the partition's slot, and partitions differ from each other.
  const std::string p0 = partition_stream("orders", 2, 0);
  const std::string p1 = partition_stream("orders", 2, 1);
  EXPECT_EQ(streamq::detail::key_slot(p0 + ":dlq"), streamq::detail::key_slot(p0));
  EXPECT_NE(streamq::detail::key_slot(p0), streamq::detail::key_slot(p1));
}

}  // namespace
