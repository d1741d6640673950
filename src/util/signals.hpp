// SPDX-License-Identifier: MIT
// Opt-in SIGINT/SIGTERM handling for Consumer::run(): a self-pipe written by the signal
// handler and one watcher thread that turns a signal into stop() calls.
#pragma once

#include <functional>

namespace streamq::detail {

/// While registered, SIGINT and SIGTERM call `on_signal` (from a watcher thread, not from the
/// signal handler). The first registration installs the handlers; the last unregistration
/// restores the previous ones.
class SignalRegistration {
 public:
  explicit SignalRegistration(std::function<void()> on_signal);
  ~SignalRegistration();
  SignalRegistration(const SignalRegistration&) = delete;
  SignalRegistration& operator=(const SignalRegistration&) = delete;

 private:
  int slot_;
};

}  // namespace streamq::detail
