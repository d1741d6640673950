// SPDX-License-Identifier: MIT
// Fixtures for the Inspector's tests: an Inspector on the test's server, dead letters written
// as a worker writes them, every task of a state read page by page; and the same over a queue of
// three partitions.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "wire/keys.hpp"

namespace streamq::test {

class InspectorTest : public ConsumerTest {
 protected:
  Inspector inspector{InspectorOptions{.connection = {.url = server.url()}}};

  Producer big_producer(const std::string& s) const {
    return Producer({.connection = {.url = server.url()}, .stream = s, .max_len = 1000000});
  }
  /// Dead letters as a worker writes them: the task's fields plus error, failed_at, original_id,
  /// consumer and reason.
  std::vector<std::string> add_dead(int n, const std::string& type = "t",
                                    const std::string& reason = "max_retries") {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) {
      const std::string task_id = type + "-" + std::to_string(i);
      const detail::Reply r = client.cmd({"XADD",
                                          dlq,
                                          "*",
                                          "task_id",
                                          task_id,
                                          "task_type",
                                          type,
                                          "payload",
                                          "{\"i\":" + std::to_string(i) + "}",
                                          "created_at",
                                          "2026-12-01T00:00:00.000000",
                                          "max_retries",
                                          "3",
                                          "retry_count",
                                          "3",
                                          "error",
                                          "boom " + std::to_string(i),
                                          "failed_at",
                                          "2026-12-01T00:00:01.000000",
                                          "original_id",
                                          "1-1",
                                          "consumer",
                                          "w1",
                                          "reason",
                                          reason});
      ids.emplace_back(r.view().check().str());
    }
    return ids;
  }
  /// Every task of `state`, page by page of `count`.
  std::vector<TaskInfo> all(TaskState state, std::size_t count, std::size_t* pages = nullptr) {
    std::vector<TaskInfo> out;
    TaskQuery q{.state = state, .count = count};
    std::size_t n = 0;
    for (;;) {
      TaskPage page = inspector.tasks(stream, q);
      EXPECT_LE(page.tasks.size(), count);
      ++n;
      for (TaskInfo& t : page.tasks) out.push_back(std::move(t));
      if (page.next_cursor.empty()) break;
      q.cursor = page.next_cursor;
    }
    if (pages) *pages = n;
    return out;
  }
};

// A partitioned queue is one queue to the Inspector: found once, stats summed, lists walking the
// partitions, actions acting on each, entry ids that two partitions share refused where they would
// act unless their partition is named.
class InspectorPartitionsTest : public InspectorTest {
 protected:
  static constexpr int kParts = 3;
  std::string base = detail::partition_base(stream);
  std::string part(int i) const { return detail::partition_stream(stream, kParts, i); }
  Producer partitioned() const {
    return Producer({.connection = {.url = server.url()}, .stream = stream, .partitions = kParts});
  }
  void add_dead_to(const std::string& partition, const std::string& id, const std::string& task_id) {
    client.cmd({"XADD", partition + ":dlq", id, "task_id", task_id, "task_type", "t", "payload", "{}",
                "retry_count", "3", "error", "boom", "reason", "max_retries"});
  }
};

}  // namespace streamq::test
