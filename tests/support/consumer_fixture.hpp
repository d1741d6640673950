// SPDX-License-Identifier: MIT
// A fixture for Consumer tests: a private server, a raw client, this test's own stream, and
// the few inspections of its pending list the tests need.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"

namespace streamq::test {

class ConsumerTest : public ::testing::Test {
 protected:
  using Fields = std::vector<std::pair<std::string, std::string>>;

  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();
  std::string dlq = stream + ":dlq";

  ConsumerOptions options() const {
    // Retries at once unless a test sets a backoff: most tests are about what a retry is,
    // not when it comes.
    return {.connection = {.url = server.url()},
            .stream = stream,
            .block = std::chrono::milliseconds(200),
            .retry_backoff = {.base = std::chrono::milliseconds(0)}};
  }
  Producer producer() const { return Producer({.connection = {.url = server.url()}, .stream = stream}); }
  std::int64_t xlen(const std::string& key) { return client.integer({"XLEN", key}); }
  std::int64_t pending() {
    const detail::Reply r = client.cmd({"XPENDING", stream, "workers"});
    return r.view().is_error() ? 0 : r.view()[0].integer();
  }
  struct PendingEntry {
    std::string owner;  // empty when not pending
    std::int64_t idle_ms = 0;
    std::int64_t deliveries = 0;
  };
  PendingEntry pending_entry(const std::string& id) {
    const detail::Reply r = client.cmd({"XPENDING", stream, "workers", id, id, "1"});
    const auto v = r.view().check();
    if (v.size() == 0) return {};
    return {std::string(v[0][1].str()), v[0][2].integer(), v[0][3].integer()};
  }
  /// Reads `count` entries as `consumer` without ever acking them: a worker that then died.
  std::vector<std::string> read_as(const std::string& consumer, int count) {
    client.cmd({"XGROUP", "CREATE", stream, "workers", "0", "MKSTREAM"});
    const detail::Reply r = client.cmd(
        {"XREADGROUP", "GROUP", "workers", consumer, "COUNT", std::to_string(count), "STREAMS", stream, ">"});
    std::vector<std::string> ids;
    if (r.view().is_nil()) return ids;
    const auto entries = r.view().check()[0][1];
    for (std::size_t i = 0; i < entries.size(); ++i) ids.emplace_back(entries[i][0].str());
    return ids;
  }
  std::string xadd(const Fields& fields) {
    std::vector<std::string> args{"XADD", stream, "*"};
    for (const auto& [k, v] : fields) {
      args.push_back(k);
      args.push_back(v);
    }
    return std::string(client.cmd(args).view().check().str());
  }
};

}  // namespace streamq::test
