// SPDX-License-Identifier: MIT
// The doctor's checks: what would lose tasks (persistence, maxmemory-policy, clock) and what
// the user may not run (ACL), on a queue of one stream, on the first partition of a partitioned
// queue, and on every master of a cluster.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "inspector_fixture.hpp"
#include "redis_server.hpp"

namespace streamq::test {
namespace {

TEST_F(InspectorTest, DoctorFlagsWhatWouldLoseTasks) {
  // The test server runs without AOF and with Redis' default policy.
  std::map<std::string, Finding> by_topic;
  for (Finding& f : inspector.doctor(stream)) by_topic[f.topic] = f;
  ASSERT_TRUE(by_topic.count("persistence"));
  EXPECT_EQ(by_topic["persistence"].severity, Finding::Severity::danger) << by_topic["persistence"].message;
  EXPECT_EQ(by_topic["maxmemory-policy"].severity, Finding::Severity::ok);
  EXPECT_EQ(by_topic["clock"].severity, Finding::Severity::ok) << by_topic["clock"].message;
  client.cmd({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"});
  client.cmd({"CONFIG", "SET", "appendonly", "yes"});
  by_topic.clear();
  for (Finding& f : inspector.doctor(stream)) by_topic[f.topic] = f;
  EXPECT_EQ(by_topic["maxmemory-policy"].severity, Finding::Severity::danger);
  EXPECT_NE(by_topic["maxmemory-policy"].message.find("allkeys-lru"), std::string::npos);
  EXPECT_NE(by_topic["persistence"].severity, Finding::Severity::danger) << by_topic["persistence"].message;
  if (client.redis_at_least(7, 0)) {
    // The default user may run everything.
    std::vector<Finding> acl;
    for (Finding& f : inspector.doctor(stream)) {
      if (f.topic == "acl") acl.push_back(f);
    }
    ASSERT_EQ(acl.size(), 4u);
    for (const Finding& f : acl) EXPECT_EQ(f.severity, Finding::Severity::ok) << f.message;
    client.cmd({"ACL", "SETUSER", "narrow", "on", ">pw", "~*", "+@read", "+acl|whoami", "+acl|dryrun",
                "+info", "+config|get", "+time", "+client|setname", "+client|id"});
    Inspector as_narrow(InspectorOptions{
        .connection = {.url = "redis://narrow:pw@127.0.0.1:" + std::to_string(server.port())}});
    acl.clear();
    for (Finding& f : as_narrow.doctor(stream)) {
      if (f.topic == "acl") acl.push_back(f);
    }
    ASSERT_EQ(acl.size(), 4u);
    EXPECT_NE(acl[0].message.find("XADD"), std::string::npos) << acl[0].message;
  }
}

TEST_F(InspectorPartitionsTest, DoctorChecksTheFirstPartitionsKeys) {
  Producer p = partitioned();
  for (int i = 0; i < kParts; ++i) p.enqueue("t", R"({})");  // one in each partition, 0 included
  // Redis 6.2 has no ACL DRYRUN: its one acl finding says so.
  const std::string expected = client.redis_at_least(7, 0) ? part(0) : "needs Redis >= 7.0";
  int acl = 0;
  for (const Finding& f : inspector.doctor(stream)) {
    if (f.topic != "acl") continue;
    ++acl;
    EXPECT_NE(f.message.find(expected), std::string::npos) << f.message;
  }
  EXPECT_GE(acl, 1);
}

// doctor() checks every master: each has its own configuration, replicas and ACL users.
TEST(Cluster, DoctorChecksEveryMaster) {
  ClusterTopology t(3);
  Inspector inspector({.connection = {.url = t.url({0})}});
  std::set<std::string> addresses;
  int persistence = 0;
  for (const Finding& f : inspector.doctor("{q}")) {
    addresses.insert(f.message.substr(0, f.message.find(": ")));
    if (f.topic == "persistence") ++persistence;
  }
  EXPECT_EQ(persistence, 3);
  std::set<std::string> masters;
  for (int i = 0; i < 3; ++i) masters.insert("127.0.0.1:" + std::to_string(t.node(i).port()));
  EXPECT_EQ(addresses, masters);
}

}  // namespace
}  // namespace streamq::test
