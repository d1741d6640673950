// SPDX-License-Identifier: MIT
// A partition's plain enqueues, merged in the shared connection's queue: the tasks of calls
// (blocking or asynchronous) queued back to back ride in one enqueue script call, mode 'each',
// which admits or refuses each task on its own, so many calls in flight cost one script call
// per up to Merge::kMostItems tasks instead of one each. The queue keeps a thread's calls in
// the order it made them (see SharedConnection).
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <vector>

#include "prepare.hpp"
#include "redis/argv.hpp"
#include "redis/shared_connection.hpp"

namespace streamq::detail {

class MergedEnqueue final : public Merge {
 public:
  /// The script call (mode 'each') for these tasks, all of the merge's partition.
  using Build = std::function<Argv(const std::vector<const Prepared*>&)>;

  explicit MergedEnqueue(Build build) : build_(std::move(build)) {}

  /// Items are `const Prepared*`, viewed until answered.
  Argv build(const std::vector<const void*>& items) const override;
  ScriptId script() const override { return ScriptId::enqueue; }
  /// Written (null), refused (QueueFullError, as a call of its own would be), or what failed
  /// the whole call (NOPERM, OOM, WRONGTYPE, a script error: each of its tasks with it).
  std::exception_ptr outcome(const Reply& reply, std::size_t i, std::size_t n) const override;

 private:
  const Build build_;
};

}  // namespace streamq::detail
