// SPDX-License-Identifier: MIT
// Asynchronous single enqueues merged: plain tasks of one partition that enqueue_async calls
// add while merged calls are on their way go out together, as one enqueue script call that
// admits or refuses each task on its own (the script's 'each' mode), so many calls in flight
// cost one script call per up to kMostTasks tasks instead of one each. (Synchronous calls are
// not merged here: a blocked caller must not depend on the completion thread, whose user
// completions may wait for it; the shared connection pipelines them.)
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "prepare.hpp"
#include "redis/argv.hpp"
#include "redis/shared_connection.hpp"

namespace streamq::detail {

/// One task in the merger: what it writes, and once answered, how it ended.
struct MergedTask {
  const Prepared* task = nullptr;  // viewed until answered
  /// Runs once answered, on the connection's completion thread, with how it ended (null:
  /// written; QueueFullError; what ended its call) and the generation of the connection that
  /// wrote it (for a WAIT). Released right after it ran.
  std::function<void(std::exception_ptr, std::uint64_t)> done{};
};

class EnqueueMerger {
 public:
  /// The script call (mode 'each') for these tasks, all of the merger's partition.
  using Build = std::function<Argv(const std::vector<const Prepared*>&)>;
  /// Tasks per call at most, and calls on their way at once.
  static constexpr std::size_t kMostTasks = 64;
  static constexpr int kMostCalls = 4;

  EnqueueMerger(SharedConnection& link, Build build) : link_(link), build_(std::move(build)) {}
  EnqueueMerger(const EnqueueMerger&) = delete;
  EnqueueMerger& operator=(const EnqueueMerger&) = delete;

  /// Writes `t` at once when fewer than kMostCalls merged calls are on their way, else with what
  /// waits beside it once one is answered; t->done runs when it is answered.
  void submit(std::shared_ptr<MergedTask> t);
  /// Sends every task that waits now, however many merged calls are on their way: a caller's
  /// other call written after this keeps its place behind them (a thread's calls are written in
  /// the order it made them).
  void flush();
  /// Returns once nothing waits or is on its way (the producer's destructor, before the
  /// connection answers what it still holds).
  void drain();

 private:
  using Batch = std::vector<std::shared_ptr<MergedTask>>;
  /// With the lock held: the next call's tasks, from the front.
  Batch take_locked();
  /// With the lock held: sends what waits while fewer than `most` calls are on their way.
  void kick_locked(std::unique_lock<std::mutex>& lock, int most = kMostCalls);
  /// The script call for `batch`; settle() runs with its outcome (or what building it threw).
  void send(const Batch& batch);
  /// Passes the turn on, and gives each task of `batch` its outcome from `o`: at once on the
  /// completion thread (`here`), else through it.
  void settle(const Batch& batch, const SharedOutcome& o, bool here);

  SharedConnection& link_;
  const Build build_;
  std::mutex mutex_;
  std::condition_variable idle_;  // drain(): nothing waits or is on its way
  std::deque<std::shared_ptr<MergedTask>> waiting_;
  int calls_ = 0;  // merged calls on their way
};

}  // namespace streamq::detail
