// SPDX-License-Identifier: MIT
// The executor: `concurrency` handler threads. Each takes an entry from the in-flight set,
// counts the start of a suspect (replayed or reclaimed entry) in Redis first, and runs the
// attempt's steps (execute()): decode it, take its limits, set it up, run the handler
// registered for its type, ask the retry policy what becomes of it and hand the resulting
// completion back. An asynchronous handler (Consumer::on_async) only starts on the thread,
// which goes on to the next entry; its attempt ends where its handler says it is done. Talks
// to: the in-flight set; Redis only for the start script of suspects, the rate limits and
// concurrency slots of task types that have one, and tracked tasks' marks (a connection per
// thread, made on first need, and one the asynchronous attempts share). Each thread holds the
// shared state, so one still running a handler after the shutdown grace period can be
// detached safely.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
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

/// The connection the asynchronous handlers' attempts share, for the release of their
/// concurrency slots when they end (their reports go through the completer), made on first
/// need and used under its lock.
struct AsyncChannel {
  std::mutex mutex;
  std::unique_ptr<Channel> channel;
};

/// What execute() did with an entry.
struct Executed {
  /// Its attempt ended on this thread: the completion the completer must write, or nothing when
  /// the task was given up on while its handler ran (see Watchdog: the completion went then).
  std::optional<Completion> done;
  /// Its asynchronous handler runs: the attempt ends elsewhere (`done` is empty).
  bool later = false;
};

/// Runs one decoded-or-not entry to its completion, or starts its asynchronous handler. Never
/// throws for anything a handler or an entry does.
Executed execute(const std::shared_ptr<Shared>& s, Work w, std::unique_ptr<Channel>& channel);

}  // namespace streamq::detail
