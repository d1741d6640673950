// SPDX-License-Identifier: MIT
// Control of running work: a timeout or a deadline stops a handler through its stop_token and
// ends the attempt as a failure; a handler that ignores the token is given up after
// timeout_grace; an operator's cancel reaches a running task; concurrency limits hold across
// workers, and a killed holder's slot frees itself.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// Burns CPU until the process is killed (a handler that never returns, in a child process).
[[noreturn]] void spin_forever() {
  std::atomic<std::uint64_t> n{0};
  for (;;) n.fetch_add(1, std::memory_order_relaxed);
}

/// Waits until the task is asked to stop (or `most` passes); returns its stop reason then.
std::string wait_for_stop(const Task& task, std::chrono::milliseconds most = 20s) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, task.stop_token(), most, [] { return false; });
  return std::string(task.stop_reason());
}

class ControlTest : public ConsumerTest {
 protected:
  ConsumerOptions fast() const {
    ConsumerOptions o = options();
    o.heartbeat_interval = 100ms;
    o.claim_min_idle = 1000ms;
    o.timeout_grace = 300ms;
    return o;
  }
  /// Runs `tasks` tasks of 50 ms over `workers` consumers of `threads` handler threads each, the
  /// handler registered with `handler_options`; returns the most that ran at once.
  int most_at_once(int workers, int threads, int tasks, const ConsumerOptions& base,
                   const HandlerOptions& handler_options) {
    Producer p = producer();
    for (int i = 0; i < tasks; ++i) p.enqueue("t", "{}");
    std::atomic<int> now{0}, most{0}, done{0};
    std::vector<std::unique_ptr<RunningConsumer>> running;
    for (int w = 0; w < workers; ++w) {
      ConsumerOptions o = base;
      o.concurrency = threads;
      o.prefetch = threads;
      running.push_back(std::make_unique<RunningConsumer>(o, [&](Consumer& c) {
        c.on(
            "t",
            [&](const Task&) {
              const int n = ++now;
              int seen = most.load();
              while (n > seen && !most.compare_exchange_weak(seen, n)) {
              }
              std::this_thread::sleep_for(50ms);
              --now;
              ++done;
            },
            handler_options);
      }));
    }
    EXPECT_TRUE(wait_until([&] { return done.load() == tasks; }, 60s));
    std::uint64_t limited = 0;
    for (auto& r : running) {
      r->stop();
      limited += r->consumer().metrics().rate_limited;
    }
    EXPECT_GT(limited, 0U) << "no start ever waited: the limit was not tested";
    return most.load();
  }
  /// The only dead letter's fields (empty when there is none).
  Fields dead_letter() {
    const auto all = client.xrange(dlq);
    return all.size() == 1 ? all[0].second : Fields{};
  }
};

TEST_F(ControlTest, ATimeoutStopsTheHandlerAndRetriesThenDeadLettersWithReasonTimeout) {
  Producer p = producer();
  p.enqueue("slow", "{}", {.max_retries = 1});
  std::atomic<int> attempts{0};
  std::vector<std::string> reasons;
  std::mutex m;
  ConsumerOptions o = fast();
  o.timeout_grace = 3s;  // the handler returns at once when asked: never given up
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("slow",
         [&](const Task& task) {
           ++attempts;
           const std::string why = wait_for_stop(task);
           std::lock_guard lock(m);
           reasons.push_back(why);
           // Returning normally after a timeout does not make it a success.
         },
         {.timeout = 200ms});
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 20s));
  worker.stop();
  EXPECT_EQ(attempts.load(), 2);
  EXPECT_EQ(reasons, (std::vector<std::string>{"timeout", "timeout"}));
  const Fields f = dead_letter();
  EXPECT_EQ(Client::get(f, "reason"), "timeout");
  EXPECT_NE(Client::get(f, "error").find("timeout of 200 ms"), std::string::npos) << Client::get(f, "error");
  EXPECT_EQ(worker.consumer().metrics().timed_out, 2U);
  EXPECT_EQ(worker.consumer().metrics().retried, 1U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 0U);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(pending(), 0);
}

TEST_F(ControlTest, AHandlerThatIgnoresItsTimeoutIsGivenUpAndItsLateReturnIsDropped) {
  Producer p = producer();
  p.enqueue("stuck", "{}", {.max_retries = 0});
  std::atomic<bool> returned{false};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("stuck",
         [&](const Task&) {
           std::this_thread::sleep_for(2500ms);  // ignores its stop_token
           returned = true;
         },
         {.timeout = 200ms});
  });
  // The fate is written at timeout + grace (about 0.5 s), long before the handler returns.
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 10s));
  EXPECT_FALSE(returned.load()) << "the dead letter waited for the handler";
  EXPECT_EQ(Client::get(dead_letter(), "reason"), "timeout");
  EXPECT_EQ(pending(), 0);
  ASSERT_TRUE(wait_until([&] { return returned.load(); }, 10s));
  std::this_thread::sleep_for(300ms);  // its completion, were it written, would be by now
  worker.stop();
  EXPECT_EQ(xlen(dlq), 1);
  EXPECT_EQ(worker.consumer().metrics().done, 0U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 1U);
  EXPECT_EQ(worker.consumer().metrics().dead_lettered, 1U);
}

TEST_F(ControlTest, ADeadlineAlreadyPastDeadLettersTheTaskWithoutRunningIt) {
  Producer p = producer();
  p.enqueue("t", "{}", {.deadline = std::chrono::system_clock::now() - 1s});
  std::atomic<int> ran{0};
  RunningConsumer worker(fast(), [&](Consumer& c) { c.on("t", [&](const Task&) { ++ran; }); });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(Client::get(dead_letter(), "reason"), "deadline");
}

TEST_F(ControlTest, ADeadlineReachedWhileRunningStopsTheHandlerAndIsNotRetried) {
  Producer p = producer();
  std::string why;
  std::atomic<int> ran{0};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("t",
         [&](const Task& task) {
           ++ran;
           why = wait_for_stop(task);
           throw std::runtime_error("stopped");
         },
         {.timeout = 1h});  // the deadline comes first
  });
  // Enqueued once the worker runs, so it starts well before its deadline.
  ASSERT_TRUE(wait_until([&] { return client.integer({"EXISTS", stream}) == 1; }, 10s));
  p.enqueue("t", "{}", {.max_retries = 5, .deadline = std::chrono::system_clock::now() + 1s});
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(why, "deadline");
  const Fields f = dead_letter();
  EXPECT_EQ(Client::get(f, "reason"), "deadline");
  EXPECT_NE(Client::get(f, "error").find("(stopped)"), std::string::npos) << Client::get(f, "error");
}

TEST_F(ControlTest, ACancelReachesARunningTaskWhichEndsCancelled) {
  Producer p = producer();
  const std::string id =
      p.enqueue("t", "{}", {.max_retries = 3, .unique_for = 1h, .retention = Retention{.done = 1h}});
  std::atomic<bool> started{false};
  std::string why;
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("t", [&](const Task& task) {
      started = true;
      why = wait_for_stop(task);
      throw std::runtime_error("interrupted");  // a cancelled task is not retried whatever it does
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(why, "cancelled");
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(xlen(dlq), 0);
  EXPECT_EQ(pending(), 0);
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
  EXPECT_EQ(client.integer({"EXISTS", stream + ":unique:" + id}), 0) << "its unique lock is released";
  EXPECT_EQ(client.cmd({"KEYS", stream + ":cancel:*"}).view().size(), 0U) << "the request goes with the task";
  const auto record = in.record(stream, id);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, TaskRecord::State::cancelled);
}

TEST_F(ControlTest, ACancelledTaskWhoseHandlerIgnoresItIsGivenUp) {
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}");
  std::atomic<bool> started{false}, returned{false};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("t", [&](const Task&) {
      started = true;
      std::this_thread::sleep_for(2500ms);
      returned = true;
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(pending(), 0);
  ASSERT_TRUE(wait_until([&] { return returned.load(); }, 10s));
  std::this_thread::sleep_for(300ms);
  worker.stop();
  EXPECT_EQ(worker.consumer().metrics().done, 0U);
  EXPECT_EQ(worker.consumer().metrics().given_up, 1U);
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ControlTest, ACancelThatComesBeforeAFailureIsNotLostToTheRetry) {
  // The handler fails before its holder's lease renewal (every 5 s here) sees the request: the
  // retry script finds it, and the task ends cancelled instead of being retried under a new id.
  Producer p = producer();
  const std::string id = p.enqueue("t", "{}", {.max_retries = 3, .retention = Retention{.done = 1h}});
  std::atomic<bool> started{false}, fail{false};
  std::atomic<int> attempts{0};
  ConsumerOptions o = options();
  o.heartbeat_interval = 5s;
  o.claim_min_idle = 30s;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("t", [&](const Task&) {
      ++attempts;
      started = true;
      while (!fail) std::this_thread::sleep_for(5ms);
      throw std::runtime_error("down");
    });
  });
  ASSERT_TRUE(wait_until([&] { return started.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, id), CancelOutcome::running);
  fail = true;
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  std::this_thread::sleep_for(200ms);
  worker.stop();
  EXPECT_EQ(attempts.load(), 1);
  EXPECT_EQ(worker.consumer().metrics().retried, 0U);
  EXPECT_EQ(xlen(stream), 0);
  EXPECT_EQ(xlen(dlq), 0);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":delayed"}), 0);
  EXPECT_EQ(client.cmd({"KEYS", stream + ":cancel:*"}).view().size(), 0U);
  EXPECT_EQ(in.record(stream, id)->state, TaskRecord::State::cancelled);
}

TEST_F(ControlTest, ACancelBeforeTheHandlerStartsKeepsItFromRunning) {
  // One handler thread, busy with the first task; the second waits in the prefetch when the
  // cancel comes, and is found cancelled by the lease renewal before it starts.
  Producer p = producer();
  p.enqueue("block", "{}");
  const std::string second = p.enqueue("t", "{}");
  std::atomic<bool> blocking{false}, release{false};
  std::atomic<int> ran{0};
  ConsumerOptions o = fast();
  o.concurrency = 1;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("block", [&](const Task&) {
      blocking = true;
      while (!release) std::this_thread::sleep_for(10ms);
    });
    c.on("t", [&](const Task&) { ++ran; });
  });
  ASSERT_TRUE(wait_until([&] { return blocking.load(); }, 10s));
  Inspector in({.connection = {.url = server.url()}});
  EXPECT_EQ(in.cancel(stream, second), CancelOutcome::running);  // delivered: in the prefetch
  std::this_thread::sleep_for(500ms);                            // several lease renewals
  release = true;
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().cancelled == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(pending(), 0);
}

TEST_F(ControlTest, AConcurrencyLimitHoldsAcrossWorkers) {
  const int most = most_at_once(4, 3, 40, fast(), {.concurrency = {.limit = 3}});
  EXPECT_EQ(most, 3);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":running:t"}), 0) << "every slot was given back";
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(ControlTest, AQueueConcurrencyLimitHoldsAcrossWorkers) {
  ConsumerOptions o = fast();
  o.concurrency_limit = {.limit = 2};
  EXPECT_EQ(most_at_once(3, 3, 30, o, {}), 2);
  EXPECT_EQ(client.integer({"ZCARD", stream + ":running"}), 0);
}

TEST_F(ControlTest, MaxInFlightLimitsOneConsumer) {
  EXPECT_EQ(most_at_once(1, 4, 20, fast(), {.max_in_flight = 1}), 1);
}

TEST_F(ControlTest, BadControlOptionsAreConfigErrors) {
  Consumer c(options());
  EXPECT_THROW(c.on("a", [](const Task&) {}, {.timeout = -1ms}), ConfigError);
  EXPECT_THROW(c.on("b", [](const Task&) {}, {.concurrency = {.limit = -1}}), ConfigError);
  EXPECT_THROW(c.on("c", [](const Task&) {}, {.max_in_flight = -1}), ConfigError);
  ConsumerOptions o = options();
  o.timeout_grace = 0ms;
  EXPECT_THROW(Consumer{o}, ConfigError);
  o = options();
  o.concurrency_limit = {.limit = -2};
  EXPECT_THROW(Consumer{o}, ConfigError);
}

// 8 worker processes share a limit of 3 on 48 tasks of 300 ms; one is killed with SIGKILL while
// it holds a slot. The most running at once, measured by the handlers in Redis, is 3; every
// task is done; the dead holder's slot frees itself after claim_min_idle.
TEST_F(ControlTest, AConcurrencyLimitHoldsUnderKillOfAHolder) {
  constexpr int kWorkers = 8, kTasks = 48;
  Producer p = producer();
  std::vector<std::string> ids;
  for (int i = 0; i < kTasks; ++i) ids.push_back(p.enqueue("limited", R"({"ms":300})"));
  const std::string marks = stream + ":now-running";  // the handlers' own record (test_worker)
  std::vector<std::unique_ptr<WorkerProcess>> procs;
  for (int i = 0; i < kWorkers; ++i) {
    procs.push_back(std::make_unique<WorkerProcess>(std::vector<std::string>{
        STREAMQ_TEST_WORKER, server.url(), stream, "w" + std::to_string(i), "concurrency=2", "prefetch=2",
        "limit=3", "min_idle_ms=1500", "heartbeat_ms=300"}));
  }
  // Kill a worker that holds a slot (its handler is running), then take its marks out of the
  // measurement: its slot still counts against the limit until it expires, so no one else
  // starts in its place meanwhile.
  std::string victim;
  ASSERT_TRUE(wait_until(
      [&] {
        const detail::Reply r = client.cmd({"SRANDMEMBER", marks});
        if (!r.view().is_string()) return false;
        victim = std::string(r.view().str());
        return true;
      },
      30s));
  victim = victim.substr(0, victim.find('/'));
  const int index = std::stoi(victim.substr(1));
  procs[static_cast<std::size_t>(index)]->kill9();
  const detail::Reply members = client.cmd({"SMEMBERS", marks});
  for (std::size_t i = 0; i < members.view().size(); ++i) {
    const std::string m(members.view()[i].str());
    if (m.starts_with(victim + "/")) client.cmd({"SREM", marks, m});
  }
  ASSERT_TRUE(wait_until([&] { return client.integer({"HLEN", stream + ":done"}) == kTasks; }, 120s));
  EXPECT_EQ(std::string(client.cmd({"GET", stream + ":most"}).view().str()), "3");
  EXPECT_EQ(xlen(dlq), 0);
  for (auto& proc : procs) {
    if (!proc->died()) proc->signal_and_wait(SIGTERM);
  }
  // Given back by the live workers; the dead one's expired (its key goes after claim_min_idle
  // without a renewal).
  EXPECT_TRUE(wait_until([&] { return client.integer({"ZCARD", stream + ":running:limited"}) == 0; }, 10s));
}

// ---- the process executor ----------------------------------------------------------------

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
           EXPECT_TRUE(task.set_progress(50));  // in the child, on a connection of its own
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
