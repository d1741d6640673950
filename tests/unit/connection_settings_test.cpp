// SPDX-License-Identifier: MIT
// Connection settings without a server: the defaults of each role and the values given, and
// the reconnect backoff (full jitter under an exponential cap).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "redis/connection.hpp"

namespace {

using namespace std::chrono_literals;

TEST(ConnectionConfig, DefaultClientNameNamesTheRole) {
  const auto producer = streamq::detail::make_connection_config({}, "producer");
  EXPECT_EQ(producer.client_name, "streamq-producer");
  EXPECT_EQ(streamq::detail::make_connection_config({}, "consumer").client_name, "streamq-consumer");
  EXPECT_EQ(producer.endpoint.host, "127.0.0.1");
  EXPECT_EQ(producer.endpoint.port, 6379);
  EXPECT_EQ(producer.connect_timeout, 2000ms);
  EXPECT_EQ(producer.socket_timeout, 5000ms);
  EXPECT_EQ(producer.backoff_base, 50ms);
  EXPECT_EQ(producer.backoff_max, 2000ms);  // a caller waits
  EXPECT_EQ(streamq::detail::make_connection_config({}, "stats").backoff_max, 2000ms);
  EXPECT_EQ(streamq::detail::make_connection_config({}, "consumer").backoff_max, 30000ms);  // nobody waits
  // The role's default never undercuts a larger base; an explicit cap is kept.
  EXPECT_EQ(streamq::detail::make_connection_config({.backoff_base = 5000ms}, "producer").backoff_max,
            5000ms);
  EXPECT_EQ(streamq::detail::make_connection_config({.backoff_max = 700ms}, "consumer").backoff_max, 700ms);
}

TEST(ConnectionConfig, GivenValuesAreKept) {
  const auto c = streamq::detail::make_connection_config({.url = "redis://u:p@cache:6390/2",
                                                          .connect_timeout = 300ms,
                                                          .socket_timeout = 7000ms,
                                                          .client_name = "billing-worker",
                                                          .backoff_base = 10ms,
                                                          .backoff_max = 10ms},
                                                         "consumer");
  EXPECT_EQ(c.client_name, "billing-worker");
  EXPECT_EQ(c.endpoint.host, "cache");
  EXPECT_EQ(c.endpoint.port, 6390);
  EXPECT_EQ(c.endpoint.db, 2);
  EXPECT_EQ(c.endpoint.user, "u");
  EXPECT_EQ(c.endpoint.password, "p");
  EXPECT_EQ(c.connect_timeout, 300ms);
  EXPECT_EQ(c.socket_timeout, 7000ms);
  EXPECT_EQ(c.backoff_base, 10ms);
  EXPECT_EQ(c.backoff_max, 10ms);
}

void check_backoff(std::chrono::milliseconds base, std::chrono::milliseconds max) {
  streamq::detail::Backoff b(base, max);
  EXPECT_EQ(b.delay(), 0ms);
  EXPECT_EQ(b.failures(), 0);
  for (int n = 1; n <= 30; ++n) {
    b.fail();
    ASSERT_EQ(b.failures(), n);
    const std::int64_t cap = std::min<std::int64_t>(max.count(), base.count() << n);
    std::int64_t highest = 0;
    for (int draw = 0; draw < 300; ++draw) {
      const auto d = b.delay().count();
      ASSERT_GE(d, 0) << "n=" << n;
      ASSERT_LE(d, cap) << "n=" << n;
      highest = std::max(highest, d);
    }
    // Full jitter spreads over the whole window: 300 uniform draws all below half the cap
    // would happen with probability 2^-300.
    EXPECT_GT(highest, cap / 2) << "n=" << n << " cap=" << cap;
  }
  b.reset();
  EXPECT_EQ(b.failures(), 0);
  for (int draw = 0; draw < 10; ++draw) EXPECT_EQ(b.delay(), 0ms);
}

TEST(Backoff, FullJitterWithinTheExponentialCap) { check_backoff(50ms, 2000ms); }

TEST(Backoff, ReachesALargeMax) { check_backoff(1ms, 60000ms); }

}  // namespace
