// SPDX-License-Identifier: MIT
// Redis Cluster routing without a server: key slots, the slot a command addresses, slot maps
// from CLUSTER SHARDS and CLUSTER SLOTS replies (RESP fed to hiredis' reader) and redirections.
#include <gtest/gtest.h>

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>

#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "resp.hpp"
#include "streamq/errors.hpp"

namespace {

using streamq::detail::Argv;
using streamq::detail::command_slot;
using streamq::detail::has_hash_tag;
using streamq::detail::HostPort;
using streamq::detail::key_slot;
using streamq::detail::parse_redirect;
using streamq::detail::Reply;

using streamq::test::bulk;
using streamq::test::parse_reply;

TEST(ClusterSlots, KeySlotIsCrc16OfTheKeyOrItsHashTag) {
  // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
  EXPECT_EQ(key_slot("123456789"), 0x31C3 % 16384);
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot(""), 0);
  // The first {...} with something inside decides.
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("{orders}:dlq"), key_slot("{orders}"));
  EXPECT_EQ(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));  // empty first tag: the whole key
  EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
  EXPECT_TRUE(has_hash_tag("{orders}"));
  EXPECT_TRUE(has_hash_tag("shop:{orders}"));
  EXPECT_FALSE(has_hash_tag("orders"));
  EXPECT_FALSE(has_hash_tag("{}orders"));
  EXPECT_FALSE(has_hash_tag("{orders"));
}

TEST(ClusterSlots, CommandSlotIsTheSlotOfTheFirstKey) {
  const int q = key_slot("{q}");
  EXPECT_EQ(command_slot(Argv{"XADD", "{q}", "*", "a", "b"}), q);
  EXPECT_EQ(command_slot(Argv{"xlen", "{q}:dlq"}), q);
  EXPECT_EQ(command_slot(Argv{"XINFO", "GROUPS", "{q}"}), q);
  EXPECT_EQ(command_slot(Argv{"XGROUP", "CREATE", "{q}", "g", "0", "MKSTREAM"}), q);
  EXPECT_EQ(command_slot(Argv{"XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "BLOCK", "100", "STREAMS",
                              "{q}:p:high", "{q}", ">", ">"}),
            q);
  EXPECT_EQ(command_slot(Argv{"EVALSHA", "abc", "2", "{q}", "{q}:dlq", "arg"}), q);
  // A group or consumer named like a keyword is not taken for one.
  EXPECT_EQ(
      command_slot(Argv{"XREADGROUP", "GROUP", "streams", "STREAMS", "COUNT", "1", "STREAMS", "{q}", ">"}),
      q);
  EXPECT_EQ(command_slot(Argv{"XREAD", "COUNT", "1", "STREAMS", "{q}", "0"}), q);
  EXPECT_EQ(command_slot(Argv{"EVAL", "return 1", "0"}), -1);
  EXPECT_EQ(command_slot(Argv{"EVALSHA", "abc", "0", "x"}), -1);
  for (const Argv& keyless :
       {Argv{"TIME"}, Argv{"CLIENT", "UNBLOCK", "7"}, Argv{"WAIT", "1", "100"}, Argv{"MULTI"}, Argv{"EXEC"},
        Argv{"INFO", "memory"}, Argv{"CONFIG", "GET", "appendfsync"}, Argv{"SCAN", "0", "MATCH", "*"},
        Argv{"ACL", "WHOAMI"}, Argv{"SCRIPT", "LOAD", "x"}}) {
    EXPECT_EQ(command_slot(keyless), -1) << keyless[0];
  }
}

TEST(ClusterSlots, RedirectionsAreParsed) {
  const auto moved = parse_redirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved.has_value());
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->to, (HostPort{"127.0.0.1", 6381}));
  const auto ask = parse_redirect("ASK 1 [::1]:7000");
  ASSERT_TRUE(ask.has_value());
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->to, (HostPort{"::1", 7000}));
  const auto unknown_endpoint = parse_redirect("MOVED 12 :7001");  // the node that answered
  ASSERT_TRUE(unknown_endpoint.has_value());
  EXPECT_EQ(unknown_endpoint->to, (HostPort{"", 7001}));
  for (const char* other : {"ERR x", "MOVED", "MOVED 16384 h:1", "MOVED x h:1", "MOVED 1 h", "MOVED 1 h:0",
                            "MOVED 1 h:99999", "TRYAGAIN Multiple keys request during rehashing of slot"}) {
    EXPECT_FALSE(parse_redirect(other).has_value()) << other;
  }
}

TEST(ClusterSlots, SlotMapFromClusterShards) {
  // Two shards (RESP2: each shard and node a flat key/value array); the second's master has
  // failed and its replica is not promoted yet, so its slots have no owner; a third serves
  // nothing. Endpoint "?" means "where you asked".
  const auto node = [](std::string_view ip, std::string_view endpoint, int port, std::string_view role,
                       std::string_view health) {
    return "*14\r\n" + bulk("id") + bulk("abc") + bulk("port") + ":" + std::to_string(port) + "\r\n" +
           bulk("ip") + bulk(ip) + bulk("endpoint") + bulk(endpoint) + bulk("role") + bulk(role) +
           bulk("replication-offset") + ":1\r\n" + bulk("health") + bulk(health);
  };
  const std::string resp =
      "*3\r\n"
      "*4\r\n" +
      bulk("slots") + "*4\r\n:0\r\n:99\r\n:200\r\n:299\r\n" + bulk("nodes") + "*2\r\n" +
      node("10.0.0.2", "10.0.0.2", 7001, "replica", "online") +
      node("10.0.0.1", "?", 7000, "master", "online") + "*4\r\n" + bulk("slots") + "*2\r\n:100\r\n:199\r\n" +
      bulk("nodes") + "*2\r\n" + node("10.0.0.3", "10.0.0.3", 7002, "master", "failed") +
      node("10.0.0.4", "10.0.0.4", 7003, "replica", "online") + "*4\r\n" + bulk("slots") + "*0\r\n" +
      bulk("nodes") + "*1\r\n" + node("10.0.0.5", "10.0.0.5", 7004, "master", "online");
  const Reply r = parse_reply(resp);
  const auto map = streamq::detail::parse_cluster_shards(r.view(), HostPort{"asked.example", 7000});
  ASSERT_EQ(map.masters.size(), 1u);
  EXPECT_EQ(*map.master_of(0), (HostPort{"10.0.0.1", 7000}));  // its ip: the endpoint was "?"
  EXPECT_EQ(*map.master_of(250), (HostPort{"10.0.0.1", 7000}));
  EXPECT_EQ(map.master_of(150), nullptr);
  EXPECT_EQ(map.master_of(300), nullptr);
  EXPECT_EQ(map.master_of(-1), nullptr);
  EXPECT_EQ(map.master_of(16384), nullptr);
}

TEST(ClusterSlots, SlotMapFromClusterSlots) {
  const std::string resp =
      "*2\r\n"
      "*4\r\n:0\r\n:8191\r\n*3\r\n" +
      bulk("") + ":7000\r\n" + bulk("id0") + "*3\r\n" + bulk("10.0.0.9") + ":7003\r\n" + bulk("id3") +
      "*3\r\n:8192\r\n:16383\r\n*3\r\n" + bulk("10.0.0.2") + ":7001\r\n" + bulk("id1");
  const Reply r = parse_reply(resp);
  auto map = streamq::detail::parse_cluster_slots(r.view(), HostPort{"seed", 7000});
  EXPECT_EQ(*map.master_of(0), (HostPort{"seed", 7000}));  // an empty host: where we asked
  EXPECT_EQ(*map.master_of(16383), (HostPort{"10.0.0.2", 7001}));
  map.assign(5, HostPort{"10.0.0.2", 7001});  // a MOVED
  EXPECT_EQ(*map.master_of(5), (HostPort{"10.0.0.2", 7001}));
  EXPECT_EQ(map.masters.size(), 2u);
  // A range outside the slots is a protocol error, not a crash.
  const Reply bad = parse_reply("*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n" + bulk("h") + ":1\r\n");
  EXPECT_THROW(streamq::detail::parse_cluster_slots(bad.view(), HostPort{"seed", 1}), streamq::Error);
}

}  // namespace
