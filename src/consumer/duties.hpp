// SPDX-License-Identifier: MIT
// The duty runner: one thread and one connection for the consumer's periodic duties (lease
// keeper, reclaimer, janitor), each run when it is due. A duty says when it is due next and
// does one bounded step per tick; a step that fails is logged and retried after a backoff,
// a lost connection is rebuilt. At shutdown only the duties that must go on while handlers
// finish (lease renewal) keep running, until stop().
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

class Duty {
 public:
  virtual ~Duty() = default;
  virtual std::string_view name() const noexcept = 0;
  /// When tick() should run next; Clock::time_point::max() = not until woken.
  virtual Clock::time_point next() const = 0;
  /// One bounded step on the duty thread's connection. Throws ConnectionError / ReplyError.
  virtual void tick(ScriptRunner& scripts, Clock::time_point now) = 0;
  /// Whether it keeps running after the consumer started to stop.
  virtual bool during_shutdown() const noexcept { return false; }
};

class DutyRunner {
 public:
  explicit DutyRunner(Shared& shared);
  ~DutyRunner();
  DutyRunner(const DutyRunner&) = delete;
  DutyRunner& operator=(const DutyRunner&) = delete;

  /// Adds a duty, last or (`first`) before the others: each round runs them in this order, and
  /// a failing one ends the round.
  void add(Duty& duty, bool first = false);
  void start();
  /// Re-reads every duty's next(): call when one became due earlier than it said.
  void wake();
  /// From now on run only the duties that go on during shutdown.
  void shutting_down();
  void stop();

 private:
  void main(const std::stop_token& stop);

  Shared& s_;
  Connection conn_;
  ScriptRunner scripts_;
  std::vector<Duty*> duties_;
  std::mutex mutex_;
  std::condition_variable_any cv_;
  bool woken_ = false;
  bool shutting_down_ = false;
  std::jthread thread_;
};

}  // namespace streamq::detail
