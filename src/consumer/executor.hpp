// SPDX-License-Identifier: MIT
// The executor: `concurrency` handler threads. Each takes an entry from the in-flight set,
// counts the start of a suspect (replayed or reclaimed entry) in Redis first, decodes it,
// runs the handler registered for its type, asks the retry policy what becomes of it and
// hands the resulting completion back. Talks to: the in-flight set; Redis only for the start
// script of suspects and the rate limits of task types that have one (a connection per
// thread, made on first need). Each thread holds the
// shared state, so one still running a handler after the shutdown grace period can be
// detached safely.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

class Executor {
 public:
  explicit Executor(std::shared_ptr<Shared> shared) : s_(std::move(shared)) {}
  ~Executor() { release_threads(); }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void start();
  /// After InFlight::stop(): joins the threads that have finished and detaches the ones still
  /// inside a handler (they finish on their own). Returns how many were detached.
  std::size_t release_threads();

 private:
  struct Thread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> exited;
  };
  std::shared_ptr<Shared> s_;
  std::vector<Thread> threads_;
};

/// A handler thread's own connection and script cache, for the start script of suspects and
/// the rate limit checks, made on first need.
struct Channel {
  explicit Channel(const ConnectionConfig& config) : conn(config), scripts(conn) {}
  Connection conn;
  ScriptRunner scripts;
};

/// Runs one decoded-or-not entry to its completion (what the completer must write); nullopt
/// when the task was given up on while its handler ran (see Watchdog: the completion went then).
/// Never throws for anything a handler or an entry does.
std::optional<Completion> execute(Shared& s, const Work& w, std::unique_ptr<Channel>& channel);

}  // namespace streamq::detail
