// SPDX-License-Identifier: MIT
#include "duties.hpp"

#include <algorithm>

#include "log.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {

DutyRunner::DutyRunner(Shared& shared) : s_(shared), conn_(shared.connection), scripts_(conn_) {}

DutyRunner::~DutyRunner() { stop(); }

void DutyRunner::add(Duty& duty, bool first) {
  if (first) {
    duties_.insert(duties_.begin(), &duty);
  } else {
    duties_.push_back(&duty);
  }
}

void DutyRunner::start() {
  thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
}

void DutyRunner::wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  cv_.notify_all();
}

void DutyRunner::shutting_down() {
  {
    std::lock_guard lock(mutex_);
    shutting_down_ = true;
    woken_ = true;
  }
  cv_.notify_all();
}

void DutyRunner::stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  thread_.join();
}

void DutyRunner::main(const std::stop_token& stop) {
  block_sigpipe_for_this_thread();  // library code only runs on this thread
  Backoff error_backoff(s_.connection.backoff_base, s_.connection.backoff_max);
  Clock::time_point not_before{};  // after an error, nothing runs before this
  while (!stop.stop_requested()) {
    bool shutting_down;
    {
      std::unique_lock lock(mutex_);
      auto until = Clock::time_point::max();
      for (const Duty* d : duties_) {
        if (!shutting_down_ || d->during_shutdown()) until = std::min(until, d->next());
      }
      // Bounded, so a wait never meets the clock's far end.
      until = std::min(std::max(until, not_before), Clock::now() + std::chrono::minutes(10));
      cv_.wait_until(lock, stop, until, [&] { return woken_; });
      woken_ = false;
      shutting_down = shutting_down_;
    }
    if (stop.stop_requested()) break;
    const auto now = Clock::now();
    if (now < not_before) continue;
    for (Duty* d : duties_) {
      if ((shutting_down && !d->during_shutdown()) || d->next() > now) continue;
      try {
        if (!conn_.connected()) {
          conn_.connect();
          count_reconnect(conn_, s_.metrics);
        }
        d->tick(scripts_, now);
        error_backoff.reset();
      } catch (const ConnectionError& e) {
        not_before = now + conn_.backoff_delay();
        log(LogLevel::warning, std::string(d->name()) + ": " + e.what() + "; reconnecting");
        break;
      } catch (const std::exception& e) {
        error_backoff.fail();
        not_before = now + error_backoff.delay();
        log(retry_level(e), std::string(d->name()) + ": " + e.what());
        break;
      }
    }
  }
}

}  // namespace streamq::detail
