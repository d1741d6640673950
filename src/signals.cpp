// SPDX-License-Identifier: MIT
#include "signals.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <thread>

#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

int g_pipe_write = -1;  // read by the signal handler; set before handlers are installed

extern "C" void on_stop_signal(int) {
  const int saved = errno;
  const char byte = 's';
  [[maybe_unused]] const auto n = write(g_pipe_write, &byte, 1);
  errno = saved;
}

struct Hub {
  std::mutex mutex;
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
  std::lock_guard lock(h.mutex);
  if (h.callbacks.empty()) {
    if (pipe2(h.fds, O_CLOEXEC) != 0) throw Error("cannot create the signal pipe");
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
  std::unique_lock lock(h.mutex);
  h.callbacks.erase(slot_);
  if (!h.callbacks.empty()) return;
  sigaction(SIGINT, &h.old_int, nullptr);
  sigaction(SIGTERM, &h.old_term, nullptr);
  const char quit = 'q';
  [[maybe_unused]] const auto n = write(h.fds[1], &quit, 1);
  lock.unlock();  // the watcher may be waiting for the mutex to run callbacks
  h.watcher.join();
  lock.lock();
  close(h.fds[0]);
  close(h.fds[1]);
  h.fds[0] = h.fds[1] = -1;
  g_pipe_write = -1;
}

}  // namespace streamq::detail
