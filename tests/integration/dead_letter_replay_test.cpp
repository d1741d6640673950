// SPDX-License-Identifier: MIT
// Replaying, deleting and purging dead letters with the Inspector: a replay while workers run
// runs each task once with its history, does not replay what fails again during it, and when
// interrupted leaves every task in exactly one place; replay and delete by filter and by ids.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "inspector_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(InspectorTest, ReplayWhileWorkersRunRunsEachTaskOnceWithItsHistory) {
  constexpr int kN = 2000;
  add_dead(kN);
  std::mutex m;
  std::map<std::string, int> runs;
  std::map<std::string, std::string> seen_fields;
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on("t", [&](const Task& task) {
      std::lock_guard lock(m);
      ++runs[task.id()];
      if (task.id() == "t-7") {
        for (const auto& [k, v] : task.fields()) seen_fields[k] = v;
      }
    });
  });
  std::vector<Progress> reports;
  const ActionResult r = inspector.replay(stream, {.progress = [&](const Progress& p) {
                                            reports.push_back(p);
                                            return true;
                                          }});
  EXPECT_EQ(r.done, kN);
  EXPECT_EQ(r.skipped, 0);
  EXPECT_TRUE(r.finished);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().done, kN);
  EXPECT_EQ(reports.back().total, kN);
  EXPECT_EQ(xlen(dlq), 0);
  ASSERT_TRUE(wait_until(
      [&] {
        std::lock_guard lock(m);
        return runs.size() == static_cast<std::size_t>(kN);
      },
      30s));
  worker.stop();
  for (const auto& [id, n] : runs) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(seen_fields["retry_count"], "0") << "a fresh attempt count";
  EXPECT_EQ(seen_fields["replay_count"], "1");
  EXPECT_EQ(seen_fields["last_error"], "boom 7") << "the history is kept";
  EXPECT_FALSE(seen_fields["replayed_from"].empty());
  EXPECT_FALSE(seen_fields.count("reason")) << "the dead letter's own fields are not copied";
  EXPECT_EQ(seen_fields["max_retries"], "3");
}

TEST_F(InspectorTest, ReplayDoesNotReplayTasksThatFailAgainDuringIt) {
  add_dead(300, "always_fails");
  // A worker that dead-letters every replayed task at once: the replay must end anyway, with
  // each dead letter that was there at its start replayed once.
  std::atomic<int> runs{0};
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.on("always_fails", [&](const Task&) {
      ++runs;
      throw PermanentError("still broken");
    });
  });
  const ActionResult r = inspector.replay(stream);
  EXPECT_EQ(r.done, 300);
  ASSERT_TRUE(wait_until([&] { return runs.load() == 300 && xlen(dlq) == 300; }, 30s));
  worker.stop();
  for (const auto& [id, f] : client.xrange(dlq)) EXPECT_EQ(Client::get(f, "replay_count"), "1") << id;
}

TEST_F(InspectorTest, ReplayAndDeleteByFilterAndByIds) {
  const auto a = add_dead(5, "a", "max_retries");
  const auto b = add_dead(4, "b", "permanent");
  client.cmd({"XADD", dlq, "*", "member", "\x01\x02", "reason", "malformed"});  // not a task

  ActionResult r = inspector.replay(stream, {.filter = {.task_type = "a"}});
  EXPECT_EQ(r.done, 5);
  EXPECT_EQ(xlen(stream), 5);
  r = inspector.replay(stream,
                       {.filter = {.ids = {b[0], b[1]}, .reason = "permanent"}, .priority = Priority::high});
  EXPECT_EQ(r.done, 2);
  EXPECT_EQ(xlen(stream + ":p:high"), 2) << "to the level asked for";
  r = inspector.replay(stream, {.filter = {.ids = {b[2]}, .reason = "max_retries"}});
  EXPECT_EQ(r.done, 0) << "the filter applies to named ids too";
  EXPECT_EQ(r.skipped, 1);
  r = inspector.replay(stream, {.filter = {.reason = "malformed"}});
  EXPECT_EQ(r.done, 0) << "an entry that is not a task is not replayed";
  EXPECT_EQ(r.skipped, 1);
  EXPECT_EQ(xlen(dlq), 3);

  r = inspector.delete_dead(stream, {.ids = {b[2], a[0]}});
  EXPECT_EQ(r.done, 1) << "a[0] was replayed already";
  EXPECT_EQ(r.skipped, 1);
  r = inspector.delete_dead(stream, {.task_type = "b"});
  EXPECT_EQ(r.done, 1);
  EXPECT_EQ(xlen(dlq), 1);
  add_dead(10);
  EXPECT_EQ(inspector.purge_dead(stream), 11);
  EXPECT_EQ(client.integer({"EXISTS", dlq}), 0);
  EXPECT_THROW(inspector.replay(stream, {.filter = {.ids = {"not-an-id"}}}), ConfigError);
}

TEST_F(InspectorTest, AnInterruptedReplayLeavesEveryTaskInExactlyOnePlace) {
  add_dead(1600);
  int batches = 0;
  const ActionResult r =
      inspector.replay(stream, {.progress = [&](const Progress&) { return ++batches < 2; }});
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.done, 1000) << "two batches of 500";
  EXPECT_EQ(xlen(stream) + xlen(dlq), 1600);
  std::set<std::string> ids;
  for (const std::string& key : {stream, dlq}) {
    for (const auto& [id, f] : client.xrange(key)) ids.insert(Client::get(f, "task_id"));
  }
  EXPECT_EQ(ids.size(), 1600u);
}

}  // namespace
}  // namespace streamq::test
