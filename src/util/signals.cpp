// SPDX-License-Identifier: MIT
#include "signals.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <thread>

#include "owned_fds.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

// Read by the signal handler (a lock-free atomic is safe there); set before the handlers are
// installed, reset after the previous ones are restored.
std::atomic<int> g_pipe_write{-1};

extern "C" void on_stop_signal(int) {
  const int saved = errno;
  const char byte = 's';
  [[maybe_unused]] const auto n = write(g_pipe_write.load(), &byte, 1);
  errno = saved;
}

struct Hub {
  // Held by a registration's whole set-up or teardown (the teardown joins the watcher), so a
  // registration on another thread never meets a half torn-down hub: it waits, then sets up
  // afresh. Never taken by the watcher, which may be waiting for `mutex` meanwhile.
  std::mutex lifecycle;
  std::mutex mutex;  // the callbacks, between registrations and the watcher
  std::map<int, std::function<void()>> callbacks;
  int next_slot = 0;
  int fds[2] = {-1, -1};
  struct sigaction old_int {};
  struct sigaction old_term {};
  std::thread watcher;

  void watch() {
    for (;;) {
      char byte = 0;
      const auto n = read(fds[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || byte == 'q') return;
      std::lock_guard lock(mutex);
      for (auto& [slot, cb] : callbacks) cb();
    }
  }
};

Hub& hub() {
  static Hub h;
  return h;
}

}  // namespace

SignalRegistration::SignalRegistration(std::function<void()> on_signal) {
  Hub& h = hub();
  std::lock_guard life(h.lifecycle);
  std::lock_guard lock(h.mutex);
  if (h.callbacks.empty()) {
    if (pipe2(h.fds, O_CLOEXEC) != 0) throw Error("cannot create the signal pipe");
    own_fd(h.fds[0]);
    own_fd(h.fds[1]);
    g_pipe_write = h.fds[1];
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &h.old_int);
    sigaction(SIGTERM, &sa, &h.old_term);
    h.watcher = std::thread([&h] { h.watch(); });
  }
  slot_ = h.next_slot++;
  h.callbacks.emplace(slot_, std::move(on_signal));
}

SignalRegistration::~SignalRegistration() {
  Hub& h = hub();
  std::lock_guard life(h.lifecycle);
  {
    std::lock_guard lock(h.mutex);
    h.callbacks.erase(slot_);
    if (!h.callbacks.empty()) return;
  }
  sigaction(SIGINT, &h.old_int, nullptr);
  sigaction(SIGTERM, &h.old_term, nullptr);
  const char quit = 'q';
  [[maybe_unused]] const auto n = write(h.fds[1], &quit, 1);
  h.watcher.join();  // without `mutex`: the watcher may be waiting for it to run callbacks
  disown_fd(h.fds[0]);
  disown_fd(h.fds[1]);
  close(h.fds[0]);
  close(h.fds[1]);
  h.fds[0] = h.fds[1] = -1;
  g_pipe_write = -1;
}

}  // namespace streamq::detail
