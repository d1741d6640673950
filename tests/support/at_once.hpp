// SPDX-License-Identifier: MIT
// How many handler calls run at once, and the most that ever did (tests of concurrency limits).
#pragma once

#include <atomic>

namespace streamq::test {

class AtOnce {
 public:
  /// A call starts: counted, and the most raised to the count now.
  void enter() {
    const int n = ++now_;
    int seen = most_.load();
    while (n > seen && !most_.compare_exchange_weak(seen, n)) {
    }
  }
  /// The call ends.
  void leave() { --now_; }
  int most() const { return most_.load(); }

 private:
  std::atomic<int> now_{0};
  std::atomic<int> most_{0};
};

}  // namespace streamq::test
