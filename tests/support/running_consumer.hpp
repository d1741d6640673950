// SPDX-License-Identifier: MIT
// Runs a Consumer on a background thread for a test; stops and joins it on destruction.
#pragma once

#include <exception>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include <streamq/consumer.hpp>

namespace streamq::test {

class RunningConsumer {
 public:
  RunningConsumer(ConsumerOptions options, const std::function<void(Consumer&)>& setup)
      : consumer_(std::move(options)) {
    setup(consumer_);
    thread_ = std::thread([this] {
      try {
        consumer_.run();
      } catch (...) {
        error_ = std::current_exception();
      }
      finished_ = true;
    });
  }
  // What run() threw fails the test here too, rather than ending the test program (a destructor
  // must not throw).
  ~RunningConsumer() {
    try {
      stop();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "Consumer::run() threw: " << e.what();
    }
  }
  RunningConsumer(const RunningConsumer&) = delete;
  RunningConsumer& operator=(const RunningConsumer&) = delete;

  /// Stops the consumer, waits for run() to return, rethrows what run() threw.
  void stop() {
    consumer_.stop();
    if (thread_.joinable()) thread_.join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  bool finished() const { return finished_; }
  Consumer& consumer() { return consumer_; }

 private:
  Consumer consumer_;
  std::thread thread_;
  std::exception_ptr error_;
  std::atomic<bool> finished_{false};
};

}  // namespace streamq::test
