// SPDX-License-Identifier: MIT
// A handler gate for tests that hold a task inside its handler while they change the world
// around it (delete its entry, steal it, act on it as an operator).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace streamq::test {

/// A handler gate: handlers wait in pass() until open(); the test waits in arrived().
/// Declare `const auto release = gate.opens_on_exit();` after the consumers whose handlers
/// pass it: a failed ASSERT then opens the gate before those consumers stop, instead of their
/// stop() waiting on a handler that never returns until the test times out.
/// A consumer stopped with a handler still in the gate leaves that handler running past its
/// shutdown_grace: the destructor opens the gate and waits for every handler to leave pass(), so
/// one returning late never touches a gate that is gone.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() {
    std::unique_lock lock(m_);
    open_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return inside_ == 0; });
  }

  class Opener {
   public:
    explicit Opener(Gate& gate) : gate_(gate) {}
    ~Opener() { gate_.open(); }
    Opener(const Opener&) = delete;
    Opener& operator=(const Opener&) = delete;

   private:
    Gate& gate_;
  };
  [[nodiscard]] Opener opens_on_exit() { return Opener(*this); }

  void pass(const std::string& entry_id) {
    std::unique_lock lock(m_);
    ++inside_;
    entry_ids_.push_back(entry_id);
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    --inside_;
    cv_.notify_all();
  }
  std::string arrived(std::size_t n = 1) {
    std::unique_lock lock(m_);
    if (!cv_.wait_for(lock, std::chrono::seconds(20), [&] { return entry_ids_.size() >= n; })) return "";
    return entry_ids_[n - 1];
  }
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::string> entry_ids_;
  bool open_ = false;
  int inside_ = 0;  // handlers in pass()
};

}  // namespace streamq::test
