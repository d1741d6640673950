// SPDX-License-Identifier: MIT
// The opt-in SIGINT/SIGTERM hub behind ConsumerOptions::stop_on_signals: registrations that
// come and go on several threads (consumers restarted in loops) never leave it torn down under
// a live one.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "util/signals.hpp"

namespace streamq::detail {
namespace {

using namespace std::chrono_literals;

bool wait_for(const std::atomic<int>& n, int want) {
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    if (n.load() >= want) return true;
    std::this_thread::yield();
  }
  return n.load() >= want;
}

TEST(SignalHub, RegistrationsComingAndGoingOnTwoThreadsLeaveSignalsWorking) {
  // Each loop's registration is often the last one, so its teardown (joining the watcher)
  // meets the other thread's next set-up.
  const auto churn = [] {
    for (int i = 0; i < 5000; ++i) SignalRegistration r([] {});
  };
  std::thread a(churn), b(churn);
  a.join();
  b.join();
  std::atomic<int> seen{0};
  {
    SignalRegistration r([&] { ++seen; });
    ASSERT_EQ(raise(SIGTERM), 0);  // caught by the hub: this process goes on
    EXPECT_TRUE(wait_for(seen, 1));
    std::atomic<int> other{0};
    {
      SignalRegistration second([&] { ++other; });
      ASSERT_EQ(raise(SIGINT), 0);
      EXPECT_TRUE(wait_for(other, 1));
      EXPECT_TRUE(wait_for(seen, 2));  // every registration hears it
    }
  }
}

}  // namespace
}  // namespace streamq::detail
