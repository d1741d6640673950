// SPDX-License-Identifier: MIT
// Pausing a queue: a paused queue, of one stream or of partitions, is not read until it is
// resumed; a worker started on a paused queue waits, and one running when the pause comes stops
// reading within a check or two and finishes what it holds.
#include <atomic>
#include <chrono>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "inspector_fixture.hpp"
#include "log_capture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

TEST_F(InspectorTest, APausedQueueIsNotReadUntilResumed) {
  ConsumerOptions o = options();
  o.pause_check_interval = 50ms;
  std::atomic<int> done{0};
  LogCapture log(LogLevel::info);
  // The consumer noticed the pause (it logs each change) and its last read returned: no client
  // is blocked in XREADGROUP any more, so nothing enqueued from now on can be delivered. (Its
  // cancel follower stays blocked in an XREAD of the pushed cancels.)
  const auto idle_paused = [&](std::size_t pauses) {
    std::istringstream clients{std::string(client.cmd({"CLIENT", "LIST"}).view().check().str())};
    bool reading = false;
    for (std::string line; std::getline(clients, line);) {
      const std::size_t flags = line.find(" flags=");
      const bool blocked =
          flags != std::string::npos &&
          line.substr(flags + 7, line.find(' ', flags + 7) - flags - 7).find('b') != std::string::npos;
      reading = reading || (blocked && line.find(" cmd=xreadgroup") != std::string::npos);
    }
    return log.count(LogLevel::info, "is paused") == pauses && !reading;
  };
  inspector.pause(stream);
  EXPECT_TRUE(inspector.paused(stream));
  RunningConsumer worker(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++done; }); });
  ASSERT_TRUE(wait_until([&] { return idle_paused(1); })) << "a consumer started on a paused queue";
  Producer p = producer();
  for (int i = 0; i < 20; ++i) p.enqueue("t", R"({})");
  // Many pause checks later, nothing was taken.
  EXPECT_FALSE(wait_until([&] { return done.load() > 0 || pending() > 0; }, 1500ms));
  inspector.resume(stream);
  ASSERT_TRUE(wait_until([&] { return done.load() == 20; }));
  // Paused while running: it stops within a check or two, and what it holds finishes.
  inspector.pause(stream);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 20; }));
  ASSERT_TRUE(wait_until([&] { return idle_paused(2); }));
  for (int i = 0; i < 10; ++i) p.enqueue("t", R"({})");
  EXPECT_FALSE(wait_until([&] { return done.load() > 20; }, 1000ms));
  EXPECT_EQ(xlen(stream), 10);
  inspector.resume(stream);
  ASSERT_TRUE(wait_until([&] { return done.load() == 30; }));
  EXPECT_FALSE(inspector.paused(stream));
}

TEST_F(InspectorPartitionsTest, APausedPartitionedQueueIsNotReadUntilResumed) {
  ConsumerOptions o = options();
  o.partitions = kParts;
  o.concurrency = kParts;
  o.pause_check_interval = 50ms;
  Producer p = partitioned();
  for (int i = 0; i < 9; ++i) p.enqueue("t", R"({})");
  inspector.pause(stream);
  std::atomic<int> done{0};
  RunningConsumer worker(o, [&](Consumer& c) { c.on("t", [&](const Task&) { ++done; }); });
  EXPECT_FALSE(wait_until([&] { return done.load() > 0; }, 1000ms)) << "no partition is read while paused";
  inspector.resume(stream);
  ASSERT_TRUE(wait_until([&] { return done.load() == 9; }));
}

}  // namespace
}  // namespace streamq::test
