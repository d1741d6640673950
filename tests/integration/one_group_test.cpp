// SPDX-License-Identifier: MIT
// streamq runs one consumer group per queue (a success deletes its entry, so a second group
// would never see what the first finished): a consumer of a second group is refused at start,
// before it creates anything, and cancel refuses a group the queue does not have.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class OneGroupTest : public ConsumerTest {
 protected:
  /// What run() of a consumer of `group` throws (it must throw before it runs anything).
  std::string refusal(const std::string& group, int partitions = 1) {
    auto o = options();
    o.group = group;
    o.partitions = partitions;
    o.concurrency = std::max(o.concurrency, partitions);
    RunningConsumer c(o, [](Consumer& c) {
      c.on("t", [](const Task&) { ADD_FAILURE() << "a refused consumer ran a task"; });
    });
    const bool ended = wait_until([&] { return c.finished(); }, 5s);
    try {
      c.stop();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return ended ? "run() returned" : "run() went on";
  }
  std::int64_t groups(const std::string& key) {
    return static_cast<std::int64_t>(client.cmd({"XINFO", "GROUPS", key}).view().check().size());
  }
};

TEST_F(OneGroupTest, AConsumerOfASecondGroupIsRefusedAtStartAndCreatesNothing) {
  producer().enqueue("t", "{}");
  std::atomic<int> ran{0};
  RunningConsumer first(options(), [&](Consumer& c) { c.on("t", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return ran == 1; }));
  const std::string why = refusal("audit");
  EXPECT_NE(why.find("has consumer group \"workers\" besides \"audit\""), std::string::npos) << why;
  EXPECT_NE(why.find("XGROUP DESTROY"), std::string::npos) << why;
  for (const std::string& level : {stream + ":p:high", stream, stream + ":p:low"})
    EXPECT_EQ(groups(level), 1);
  // The first group's consumer goes on as before.
  producer().enqueue("t", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 2 && pending() == 0; }));
  first.stop();
}

TEST_F(OneGroupTest, AnotherGroupOnOneLevelIsEnough) {
  client.cmd({"XGROUP", "CREATE", stream + ":p:low", "reporting", "0", "MKSTREAM"}).view().check();
  const std::string why = refusal("workers");
  EXPECT_NE(why.find("has consumer group \"reporting\" besides \"workers\""), std::string::npos) << why;
  // Nothing created: not on the low level, nor on the levels before it.
  EXPECT_EQ(groups(stream + ":p:low"), 1);
  EXPECT_EQ(client.integer({"EXISTS", stream}), 0);
  EXPECT_EQ(client.integer({"EXISTS", stream + ":p:high"}), 0);
}

TEST_F(OneGroupTest, AnotherGroupOnOnePartitionIsRefusedBeforeAnyPartitionIsTouched) {
  std::string base = stream;
  std::erase(base, '{');
  std::erase(base, '}');
  client.cmd({"XGROUP", "CREATE", "{" + base + ":1}", "audit", "0", "MKSTREAM"}).view().check();
  const std::string why = refusal("workers", 2);
  EXPECT_NE(why.find("has consumer group \"audit\" besides \"workers\""), std::string::npos) << why;
  for (const std::string& level :
       {"{" + base + ":0}", "{" + base + ":0}:p:high", "{" + base + ":1}:p:high"}) {
    EXPECT_EQ(client.integer({"EXISTS", level}), 0) << level;
  }
}

TEST_F(OneGroupTest, OfTwoGroupsStartingAtOnceOnANewQueueOneRuns) {
  std::atomic<int> ran{0};
  const auto start = [&](const std::string& group) {
    auto o = options();
    o.group = group;
    return std::make_unique<RunningConsumer>(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++ran; }); });
  };
  auto a = start("a");
  auto b = start("b");
  ASSERT_TRUE(wait_until([&] { return a->finished() || b->finished(); }));
  auto& refused = a->finished() ? a : b;
  auto& running = a->finished() ? b : a;
  EXPECT_THROW(refused->stop(), ConfigError);
  EXPECT_FALSE(running->finished());
  EXPECT_EQ(groups(stream), 1);
  producer().enqueue("t", "{}");
  ASSERT_TRUE(wait_until([&] { return ran == 1; }));
  running->stop();
}

// A worker user of an ACL written before the check (without XINFO GROUPS) still runs; the
// check is skipped with a warning.
TEST_F(OneGroupTest, AWorkerThatMayNotListGroupsRunsUnchecked) {
  client.cmd({"ACL", "SETUSER", "older", "on", ">pw", "~*", "+@all", "-xinfo"}).view().check();
  producer().enqueue("t", "{}");
  std::atomic<int> ran{0};
  auto o = options();
  o.connection.url = "redis://older:pw@127.0.0.1:" + std::to_string(server.port());
  RunningConsumer w(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return ran == 1; }));
  w.stop();
}

TEST_F(OneGroupTest, CancelRefusesAGroupTheQueueDoesNotHave) {
  const std::string task = producer().enqueue("t", "{}");
  read_as("busy-worker", 1);  // delivered to group workers: it may be running
  Inspector wrong({.connection = {.url = server.url()}, .group = "wrong"});
  try {
    wrong.cancel(stream, task);
    ADD_FAILURE() << "cancel with an unknown group went through";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no consumer group \"wrong\" (its groups: workers)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(xlen(stream), 1);  // nothing changed
  Inspector right({.connection = {.url = server.url()}});
  EXPECT_EQ(right.cancel(stream, task), CancelOutcome::running);
  // A level no group reads has delivered nothing: its tasks are cancelled whatever the group.
  const std::string high = producer().enqueue("t", "{}", {.priority = Priority::high});
  client.cmd({"XGROUP", "DESTROY", stream + ":p:high", "workers"});
  EXPECT_EQ(wrong.cancel(stream, high), CancelOutcome::cancelled);
}

}  // namespace
}  // namespace streamq::test
