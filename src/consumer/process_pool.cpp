// SPDX-License-Identifier: MIT
#include "process_pool.hpp"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "log.hpp"
#include "shared.hpp"
#include "streamq/errors.hpp"
#include "util/owned_fds.hpp"

namespace streamq::detail {
namespace {

/// This process's threads now (/proc/self/task), 0 when that cannot be read.
std::size_t thread_count() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return 0;
  std::size_t n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

std::atomic<bool> g_threads_warned{false};

/// Held from a fork server's socketpair to the worker's close of the fork server's end, so that
/// a fork server of another Consumer of this process, forked meanwhile, holds no copy of it.
std::mutex g_fork_mutex;

void warn_of_threads() {
  const std::size_t threads = thread_count();
  if (threads <= 1 || g_threads_warned.exchange(true)) return;
  log(LogLevel::warning,
      "process executor: the fork server was forked while this process ran " + std::to_string(threads) +
          " threads; a lock another thread held at that moment (a mutex of the application, a logger's) "
          "stays held in every child, and a handler that waits for it never returns. Call "
          "Consumer::start_fork_server() before the application starts threads (see docs/control.md)");
}

}  // namespace

ProcessPool::ProcessPool(const Registrations& handlers, std::size_t max_children)
    : handlers_(handlers),
      max_children_(max_children == 0 ? 1 : max_children),
      slot_used_(max_children_, false) {
  void* page = mmap(nullptr, sizeof(std::atomic<std::int64_t>) * max_children_, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) throw Error(std::string("process executor: mmap: ") + std::strerror(errno));
  deadlines_ = static_cast<std::atomic<std::int64_t>*>(page);
  for (std::size_t i = 0; i < max_children_; ++i) new (&deadlines_[i]) std::atomic<std::int64_t>(0);
  std::lock_guard lock(mutex_);
  try {
    start_server_locked();
  } catch (...) {
    munmap(deadlines_, sizeof(std::atomic<std::int64_t>) * max_children_);
    throw;
  }
}

ProcessPool::~ProcessPool() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    while (!idle_.empty()) {
      std::unique_ptr<PoolChild> c = std::move(idle_.back());
      idle_.pop_back();
      discard_locked(std::move(c));
    }
    stop_server_locked();
  }
  munmap(deadlines_, sizeof(std::atomic<std::int64_t>) * max_children_);
}

void ProcessPool::start_server_locked() {
  warn_of_threads();
  std::lock_guard forking(g_fork_mutex);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw Error(std::string("process executor: socketpair: ") + std::strerror(errno));
  }
  own_fd(sv[0]);
  // Every signal blocked across the fork: the fork server sets its own handlers first.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  const pid_t worker = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    close_owned_fds(sv[1]);  // the worker's Redis connections, its end of this socket, its children's
    serve_forks(sv[1], worker, handlers_, deadlines_, max_children_);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::close(sv[1]);
  if (pid < 0) {
    disown_fd(sv[0]);
    ::close(sv[0]);
    throw Error(std::string("process executor: fork of the fork server: ") + std::strerror(fork_errno));
  }
  control_ = sv[0];
  server_ = pid;
}

void ProcessPool::stop_server_locked(std::chrono::milliseconds patience) {
  // Its socket's end is the fork server's signal to kill what it started and leave.
  if (control_ >= 0) {
    disown_fd(control_);
    ::close(control_);
    control_ = -1;
  }
  if (server_ > 0) {
    // It ends within two seconds (end_all). One that did not (it does not answer, or a copy of
    // the socket's end lives on in a process the application forked) is killed, and its
    // children with it (their parent-death signal), but only while it is surely still its pid's
    // owner, a child not yet reaped.
    const Clock::time_point give_up = Clock::now() + patience;
    pid_t got = 0;
    while ((got = waitpid(server_, nullptr, WNOHANG)) == 0 && Clock::now() < give_up) usleep(2000);
    if (got == 0) {
      kill(server_, SIGKILL);
      while (waitpid(server_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  server_ = -1;
}

std::optional<Frame> ProcessPool::ask_locked(FrameKind kind, const std::string& body, int* passed) {
  if (control_ < 0 || !send_frame(control_, kind, body)) return std::nullopt;
  for (;;) {
    pollfd p{control_, POLLIN, 0};
    const int ready = poll(&p, 1, 200);
    if (ready > 0) return receive_frame(control_, passed);
    if (ready < 0 && errno != EINTR) return std::nullopt;
    // No answer yet (a fork server answers at once, or within a second for a reap): one that
    // died while a copy of its socket's end lives on (in a process the application forked)
    // would never answer.
    if (ready == 0 && server_ > 0) {
      const pid_t got = waitpid(server_, nullptr, WNOHANG);
      if (got == server_ || (got < 0 && errno == ECHILD)) {  // (ECHILD: reaped by the application)
        server_ = -1;
        stop_server_locked(std::chrono::milliseconds(0));
        return std::nullopt;
      }
    }
  }
}

std::unique_ptr<PoolChild> ProcessPool::acquire() {
  std::lock_guard lock(mutex_);
  if (closed_) throw Error("process executor: the consumer stopped; no process starts");
  if (!idle_.empty()) {
    std::unique_ptr<PoolChild> c = std::move(idle_.back());
    idle_.pop_back();
    ++out_;
    return c;
  }
  std::size_t slot = 0;
  while (slot < max_children_ && slot_used_[slot]) ++slot;
  if (slot == max_children_)
    throw Error("process executor: every child is out (more handler threads than children)");
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = -1;
    const std::optional<Frame> answer = ask_locked(FrameKind::spawn, WireWriter().u64(slot).take(), &fd);
    if (answer && answer->kind == FrameKind::spawned && fd >= 0) {
      std::uint64_t pid = 0;
      WireReader(answer->body).u64(pid);
      own_fd(fd);
      auto c = std::make_unique<PoolChild>();
      c->pid = static_cast<pid_t>(pid);
      c->fd = fd;
      c->slot = slot;
      slot_used_[slot] = true;
      deadlines_[slot].store(0, std::memory_order_relaxed);
      ++out_;
      return c;
    }
    if (fd >= 0) ::close(fd);
    if (answer) {
      throw Error("process executor: the fork server could not fork a child: " +
                  (answer->kind == FrameKind::failed ? answer->body : std::string("a malformed answer")));
    }
    // The fork server is gone (killed): a new one, forked from the running worker, with its threads.
    log(LogLevel::warning,
        "process executor: the fork server is gone; a new one is forked from the running worker (its other "
        "threads' locks are copied in the state they are in)");
    stop_server_locked(std::chrono::milliseconds(0));  // gone, or not answering
    for (auto& c : idle_) {
      disown_fd(c->fd);
      ::close(c->fd);
      slot_used_[c->slot] = false;
    }
    idle_.clear();
    start_server_locked();
  }
  throw Error("process executor: the fork server does not answer");
}

void ProcessPool::release(std::unique_ptr<PoolChild> child) {
  std::lock_guard lock(mutex_);
  --out_;
  if (!closed_) {
    idle_.push_back(std::move(child));
    return;
  }
  discard_locked(std::move(child));
  if (out_ == 0) stop_server_locked();
}

ChildEnd ProcessPool::discard(std::unique_ptr<PoolChild> child) {
  std::lock_guard lock(mutex_);
  --out_;
  ChildEnd end = discard_locked(std::move(child));
  if (closed_ && out_ == 0) stop_server_locked();
  return end;
}

ChildEnd ProcessPool::discard_locked(std::unique_ptr<PoolChild> child) {
  ChildEnd end;
  deadlines_[child->slot].store(0, std::memory_order_relaxed);
  disown_fd(child->fd);
  ::close(child->fd);  // a child waiting for its next task leaves at this
  const std::optional<Frame> answer =
      ask_locked(FrameKind::reap, WireWriter().u64(static_cast<std::uint64_t>(child->pid)).take());
  if (answer && answer->kind == FrameKind::reaped) {
    WireReader r(answer->body);
    std::uint64_t known = 0, status = 0, by_deadline = 0;
    if (r.u64(known) && r.u64(status) && r.u64(by_deadline)) {
      end.known = known == 1;
      end.status = static_cast<int>(status);
      end.by_deadline = by_deadline == 1;
    }
  }
  slot_used_[child->slot] = false;
  return end;
}

void ProcessPool::signal(const PoolChild& child, int sig) {
  std::lock_guard lock(mutex_);
  ask_locked(
      FrameKind::signal,
      WireWriter().u64(static_cast<std::uint64_t>(child.pid)).u64(static_cast<std::uint64_t>(sig)).take());
}

void ProcessPool::set_deadline(const PoolChild& child, std::int64_t until) noexcept {
  deadlines_[child.slot].store(until, std::memory_order_relaxed);
}

void ProcessPool::close() {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  closed_ = true;
  while (!idle_.empty()) {
    std::unique_ptr<PoolChild> c = std::move(idle_.back());
    idle_.pop_back();
    discard_locked(std::move(c));
  }
  if (out_ == 0) stop_server_locked();
}

pid_t ProcessPool::server_pid() const {
  std::lock_guard lock(mutex_);
  return server_;
}

}  // namespace streamq::detail
