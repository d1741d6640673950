// SPDX-License-Identifier: MIT
// A fixture for the tests of what waits in a queue's delayed set (delayed tasks, retries
// waiting out their backoff, tasks a rate limit put back): the set's size, its due times and its
// members' fields, and the server's clock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"

namespace streamq::test {

class SchedulingTest : public ConsumerTest {
 protected:
  std::string delayed = stream + ":delayed";

  std::int64_t zcard() { return client.integer({"ZCARD", delayed}); }
  /// The server's clock in ms.
  std::int64_t server_ms() {
    const detail::Reply r = client.cmd({"TIME"});
    const auto v = r.view().check();
    return std::stoll(std::string(v[0].str())) * 1000 + std::stoll(std::string(v[1].str())) / 1000;
  }
  /// A delayed member's fields (lib/delayed.lua's format: a MessagePack array of strings, the
  /// tag, a nonce, the stream it goes to, then the fields), checked for that shape.
  static std::map<std::string, std::string> member_fields(const std::string& member) {
    const auto parts = nlohmann::json::from_msgpack(member);
    std::map<std::string, std::string> fields;
    EXPECT_TRUE(parts.is_array() && parts.size() >= 5 && parts.size() % 2 == 1) << parts.dump();
    if (!parts.is_array()) return fields;
    for (std::size_t i = 3; i + 1 < parts.size(); i += 2) fields[parts[i]] = parts[i + 1];
    return fields;
  }
  /// Scores of the delayed set, in order.
  std::vector<std::int64_t> due_times() {
    const detail::Reply r = client.cmd({"ZRANGE", delayed, "0", "-1", "WITHSCORES"});
    const auto v = r.view().check();
    std::vector<std::int64_t> out;
    for (std::size_t i = 1; i < v.size(); i += 2) out.push_back(std::stoll(std::string(v[i].str())));
    return out;
  }
};

}  // namespace streamq::test
