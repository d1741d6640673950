// SPDX-License-Identifier: MIT
// Handlers run in a child process (the process executor): one that loops forever is killed at
// its timeout (SIGKILL after an ignored SIGTERM) and retried, a crash fails that task alone and a
// retry's progress and result come back, CPU and address-space limits bound it, a cancel kills
// it, a stop reaches the processes it started, and limits need the process executor.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "control_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// Burns CPU until the process is killed (a handler that never returns, in a child process).
[[noreturn]] void spin_forever() {
  std::atomic<std::uint64_t> n{0};
  for (;;) n.fetch_add(1, std::memory_order_relaxed);
}

TEST_F(ControlTest, AProcessHandlerThatLoopsForeverIsKilledAtItsTimeoutAndRetried) {
  Producer p = producer();
  p.enqueue("spin", "{}", {.max_retries = 2});
  std::atomic<int> attempts{0};
  const auto started = std::chrono::steady_clock::now();
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.use([&](const Task&, const Next& next) {  // runs in the worker, around the child
      ++attempts;
      next();
    });
    c.on("spin",
         [](const Task& task) {
           if (task.retry_count() == 0) {
             spin_forever();
           }
           if (task.retry_count() == 1) {
             std::signal(SIGTERM, SIG_IGN);  // ignores the polite stop: SIGKILL follows
             spin_forever();
           }
         },
         {.timeout = 300ms, .executor = HandlerExecutor::process});
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 20s));
  const auto took = std::chrono::steady_clock::now() - started;
  worker.stop();
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(worker.consumer().metrics().timed_out, 2U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 0U) << "the children were killed, not given up on";
  EXPECT_LT(took, 10s);
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ControlTest, ACrashOfAProcessHandlerFailsThatTaskAloneAndItsResultsComeBack) {
  Producer p = producer();
  const std::string id = p.enqueue("crashy", "{}", {.max_retries = 1, .retention = Retention{.done = 1h}});
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("crashy",
         [](const Task& task) {
           if (task.retry_count() == 0) std::abort();
           EXPECT_TRUE(task.set_progress(50));  // in the child: sent to the worker, which writes it
           task.set_result(R"("from the child")");
         },
         {.executor = HandlerExecutor::process});
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 20s));
  worker.stop();
  EXPECT_EQ(worker.consumer().metrics().retried, 1U);
  Inspector in({.connection = {.url = server.url()}});
  const auto record = in.record(stream, id);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, TaskRecord::State::done);
  EXPECT_EQ(record->result, R"("from the child")");
  EXPECT_EQ(record->progress, "50");
  EXPECT_EQ(record->attempts, 2);
}

TEST_F(ControlTest, ACpuLimitKillsAProcessHandler) {
  Producer p = producer();
  p.enqueue("burn", "{}", {.max_retries = 0});
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("burn", [](const Task&) { spin_forever(); },
         {.executor = HandlerExecutor::process, .limits = {.cpu = 1s}});
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 30s));
  worker.stop();
  const std::string error = Client::get(dead_letter(), "error");
  EXPECT_NE(error.find("killed by signal " + std::to_string(SIGXCPU)), std::string::npos) << error;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // their shadow memory takes terabytes of address space
#else
constexpr bool kSanitized = false;
#endif

TEST_F(ControlTest, AnAddressSpaceLimitBoundsAProcessHandler) {
  if (kSanitized) GTEST_SKIP() << "RLIMIT_AS cannot be set under AddressSanitizer or ThreadSanitizer";
  Producer p = producer();
  p.enqueue("hog", "{}", {.max_retries = 0});
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("hog",
         [](const Task&) {
           std::vector<char> big(std::size_t{2} << 30);  // 2 GiB
           big[big.size() - 1] = 1;
         },
         {.executor = HandlerExecutor::process, .limits = {.address_space = std::uint64_t{512} << 20}});
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 20s));
  worker.stop();
  const std::string error = Client::get(dead_letter(), "error");
  EXPECT_NE(error.find("bad_alloc"), std::string::npos) << error;
}

TEST_F(ControlTest, ACancelKillsARunningProcessHandler) {
  Producer p = producer();
  const std::string id = p.enqueue("spin", "{}");
  std::atomic<bool> started{false};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.use([&](const Task&, const Next& next) {
      started = true;
      next();
    });
    c.on("spin", [](const Task&) { spin_forever(); }, {.executor = HandlerExecutor::process});
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(worker.consumer().metrics().given_up, 0U);
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ControlTest, AStopReachesWhatAProcessHandlerStarted) {
  // The handler's child starts a grandchild (as system() would) and both loop; the timeout's
  // signals go to the child's process group, so the grandchild stops too.
  const std::string pid_file = ::testing::TempDir() + "streamq-grandchild-" + std::to_string(getpid());
  std::remove(pid_file.c_str());
  Producer p = producer();
  p.enqueue("spawn", "{}", {.max_retries = 0});
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("spawn",
         [&](const Task&) {
           if (fork() == 0) {
             if (FILE* f = std::fopen(pid_file.c_str(), "w")) {
               std::fprintf(f, "%d\n", static_cast<int>(getpid()));
               std::fclose(f);
             }
             spin_forever();
           }
           spin_forever();
         },
         {.timeout = 300ms, .executor = HandlerExecutor::process});
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 20s));
  worker.stop();
  int grandchild = 0;
  if (FILE* f = std::fopen(pid_file.c_str(), "r")) {
    EXPECT_EQ(std::fscanf(f, "%d", &grandchild), 1);
    std::fclose(f);
  }
  std::remove(pid_file.c_str());
  ASSERT_GT(grandchild, 0) << "the grandchild did not start";
  // Killed, then reaped by init (or a subreaper): gone, or at most a zombie for a moment.
  EXPECT_TRUE(wait_until(
      [&] {
        if (kill(grandchild, 0) != 0) return true;
        std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
        std::string pid, name, state;
        stat >> pid >> name >> state;
        return state == "Z";
      },
      5s))
      << "grandchild " << grandchild << " still runs";
  EXPECT_EQ(Client::get(dead_letter(), "reason"), "timeout");
}

TEST_F(ControlTest, ProcessLimitsNeedTheProcessExecutor) {
  Consumer c(options());
  EXPECT_THROW(c.on("a", [](const Task&) {}, {.limits = {.cpu = 1s}}), ConfigError);
  EXPECT_THROW(c.on("b", [](const Task&) {}, {.executor = HandlerExecutor::process, .limits = {.cpu = -1s}}),
               ConfigError);
}

}  // namespace
}  // namespace streamq::test
