// SPDX-License-Identifier: MIT
// Tools of the tests that kill worker processes: a streamq_test_worker process to start and
// kill, reads of what the workers recorded, and the chaos harness that kills workers at random
// under a queue.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "redis_server.hpp"

namespace streamq::test {

using namespace std::chrono_literals;

/// One streamq_test_worker process; its stderr goes to `log_file` when one is given.
class WorkerProcess {
 public:
  explicit WorkerProcess(std::vector<std::string> args, std::string log_file = "")
      : args_(std::move(args)), log_file_(std::move(log_file)) {
    start();
  }
  ~WorkerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void start() {
    std::vector<char*> argv;
    for (auto& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = spawn_child(args_[0], argv, log_file_);
    ASSERT_GT(pid_, 0);
  }
  /// Sends `sig` without waiting.
  void signal(int sig) { kill(pid_, sig); }
  /// Waits up to `timeout` for the process to exit; returns its wait status, or -1.
  int wait_exit(std::chrono::milliseconds timeout) {
    int status = -1;
    const bool exited = wait_until([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!exited) return -1;
    pid_ = -1;
    return status;
  }
  void kill9() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  /// Sends `sig` and waits for the exit; returns the wait status.
  int signal_and_wait(int sig) {
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  pid_t pid() const noexcept { return pid_; }
  /// True when the process has died on its own (it is then reaped).
  bool died() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }

 private:
  std::vector<std::string> args_;
  std::string log_file_;
  pid_t pid_ = -1;
};

/// The text of a file (empty when missing).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Pending entries of the group: id -> (owner, idle ms).
inline std::map<std::string, std::pair<std::string, std::int64_t>> pending_entries(
    Client& c, const std::string& stream) {
  std::map<std::string, std::pair<std::string, std::int64_t>> out;
  const detail::Reply r = c.cmd({"XPENDING", stream, "workers", "-", "+", "1000"});
  const auto v = r.view().check();
  for (std::size_t i = 0; i < v.size(); ++i) {
    out[std::string(v[i][0].str())] = {std::string(v[i][1].str()), v[i][2].integer()};
  }
  return out;
}

inline std::map<std::string, std::int64_t> hash(Client& c, const std::string& key) {
  std::map<std::string, std::int64_t> out;
  const detail::Reply r = c.cmd({"HGETALL", key});
  const auto v = r.view().check();
  for (std::size_t i = 0; i + 1 < v.size(); i += 2) out[std::string(v[i].str())] = v[i + 1].as_int();
  return out;
}

inline std::int64_t pending(Client& c, const std::string& stream) {
  const detail::Reply r = c.cmd({"XPENDING", stream, "workers"});
  return r.view().is_error() ? -1 : r.view()[0].integer();
}

/// The chaos harness of the tests that kill workers: `workers` worker processes named
/// slot-0.., one killed and restarted under its name every `interval` until every task is
/// recorded done (or `rounds` kills); then waits until all are done and nothing is left in the
/// stream or the PEL, and checks the oracle: no task lost, nothing unexpected ran, nothing
/// dead-lettered, duplicates within kills x prefetch. Returns the kill count. The workers'
/// max_deliveries is above what the kills alone can reach.
inline int run_chaos(const RedisServer& server, Client& client, const std::string& stream,
                     const std::vector<std::string>& ids, int workers, int prefetch, int rounds,
                     std::chrono::milliseconds interval, const std::vector<std::string>& worker_args = {}) {
  std::vector<std::unique_ptr<WorkerProcess>> procs;
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> args{
        STREAMQ_TEST_WORKER, server.url(), stream, "slot-" + std::to_string(i), "concurrency=2",
        "prefetch=" + std::to_string(prefetch),
        // A restarted worker replays its oldest entries first, so a victim killed again
        // before it got through them (a slow build, the same slot picked twice in a row)
        // charges the same entry at each kill. The crash-loop guard must not take that for a
        // poison task (it would dead-letter a task this oracle expects done): kills alone
        // reach at most rounds + 1 starts, and a stalled heartbeat's reclaim one more each,
        // so twice that is out of reach while still a bound.
        "max_deliveries=" + std::to_string(2 * rounds + 2)};
    args.insert(args.end(), worker_args.begin(), worker_args.end());
    procs.push_back(std::make_unique<WorkerProcess>(args));
  }
  const auto total = static_cast<std::int64_t>(ids.size());
  std::mt19937 rng(12345);
  int kills = 0;
  for (int i = 0; i < rounds && client.integer({"HLEN", stream + ":done"}) < total; ++i) {
    std::this_thread::sleep_for(interval);  // the fault schedule
    auto& w = procs[rng() % procs.size()];
    w->kill9();
    w->start();
    ++kills;
  }
  EXPECT_TRUE(wait_until(
      [&] {
        return client.integer({"HLEN", stream + ":done"}) == total && client.integer({"XLEN", stream}) == 0 &&
               pending(client, stream) == 0 && client.integer({"ZCARD", stream + ":delayed"}) == 0;
      },
      60s))
      << "done " << client.integer({"HLEN", stream + ":done"}) << " of " << total;
  const auto done = hash(client, stream + ":done");
  for (const auto& id : ids) EXPECT_TRUE(done.count(id)) << "lost task " << id;
  EXPECT_EQ(done.size(), ids.size());  // nothing unexpected ran
  EXPECT_EQ(client.integer({"XLEN", stream + ":dlq"}), 0);
  std::int64_t runs = 0;
  for (const auto& [id, n] : done) runs += n;
  // A kill can repeat at most what the victim held: its prefetch window.
  EXPECT_LE(runs - total, static_cast<std::int64_t>(kills) * prefetch);
  std::printf("kills=%d duplicates=%lld\n", kills, static_cast<long long>(runs - total));
  return kills;
}

}  // namespace streamq::test
