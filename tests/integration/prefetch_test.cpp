// SPDX-License-Identifier: MIT
// The prefetch: a worker of long tasks holds few entries beyond those its handlers run, so a
// worker that joins later shares the backlog (Celery's prefetch footgun, not ours); one of
// short tasks still reads in large batches.
#include <atomic>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class PrefetchTest : public ConsumerTest {
 protected:
  /// Entries of the group's pending list owned by `consumer`.
  std::int64_t held_by(const std::string& consumer) {
    const detail::Reply r = client.cmd({"XPENDING", stream, "workers"});
    const auto v = r.view().check();
    if (v[3].is_nil()) return 0;
    for (std::size_t i = 0; i < v[3].size(); ++i) {
      if (v[3][i][0].str() == consumer) return std::stoll(std::string(v[3][i][1].str()));
    }
    return 0;
  }
};

TEST_F(PrefetchTest, AWorkerOfLongTasksHoldsFewBeyondItsHandlersSoALaterWorkerShares) {
  constexpr int kTasks = 60;
  auto p = producer();
  for (int i = 0; i < kTasks; ++i) p.enqueue("slow", "{}");
  std::atomic<int> ran_first{0}, ran_second{0};
  auto first = options();
  first.consumer_name = "first";
  first.concurrency = 2;  // the default prefetch (128) could hold the whole backlog
  RunningConsumer a(first, [&](Consumer& c) {
    c.on("slow", [&](const Task&) {
      std::this_thread::sleep_for(200ms);
      ++ran_first;
    });
  });
  ASSERT_TRUE(wait_until([&] { return ran_first >= 2; }));
  // Two run; a few more wait here (one, or a few more when the first window of starts, the
  // idle handlers' burst, reads fast; and two done whose acks are on their way). The rest stays
  // in the stream for anyone. (Before the start pace, with 40 tasks: 38 held.)
  EXPECT_LE(held_by("first"), 12);
  auto second = options();
  second.consumer_name = "second";
  second.concurrency = 2;
  RunningConsumer b(second, [&](Consumer& c) {
    c.on("slow", [&](const Task&) {
      std::this_thread::sleep_for(200ms);
      ++ran_second;
    });
  });
  ASSERT_TRUE(wait_until([&] { return ran_first + ran_second == kTasks && pending() == 0; }, 30s));
  // Two workers of two threads each: the later one runs about half of what was left (a slow
  // start of its own leaves it less).
  EXPECT_GE(ran_second, 8) << "first ran " << ran_first;  // (it started late: none, before)
  EXPECT_LE(held_by("first"), 0);
}

}  // namespace
}  // namespace streamq::test
