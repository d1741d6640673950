// SPDX-License-Identifier: MIT
// The process executor's pool (HandlerExecutor::process): a fork server, forked from the worker
// before its threads start (Consumer::run, or Consumer::start_fork_server earlier), forks the
// children; a child runs one task at a time, for many tasks, sent to it over a Unix socket by
// the handler thread that has it out. The fork server kills a child whose deadline (its dead
// man's switch, renewed by the worker with its leases) passed, and, when the worker's end of
// its socket closes (the worker ended, however), kills every child's process group and what is
// left of their descendants (it is their subreaper), then leaves. A child whose fork server is
// gone kills its own group.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "inflight.hpp"
#include "process_wire.hpp"

namespace streamq::detail {

struct Registration;  // shared.hpp
using Registrations = std::unordered_map<std::string, Registration>;

/// A child of the pool, out with one handler thread.
struct PoolChild {
  pid_t pid = -1;
  int fd = -1;           // the worker's end of its socket
  std::size_t slot = 0;  // its deadline's place in the pool's shared page
};

/// How a child ended, as its fork server saw it.
struct ChildEnd {
  bool known = false;        // false: the fork server did not have it (a fork server that died)
  int status = 0;            // its waitpid status
  bool by_deadline = false;  // killed by its dead man's switch
};

class ProcessPool {
 public:
  /// Forks the fork server now, from the calling thread: a copy of this process as it is, with
  /// `handlers` (which must outlive the pool's use); at most `max_children` children at once.
  /// @throws Error when it cannot be forked.
  ProcessPool(const Registrations& handlers, std::size_t max_children);
  ~ProcessPool();
  ProcessPool(const ProcessPool&) = delete;
  ProcessPool& operator=(const ProcessPool&) = delete;

  /// An idle child, or a new one. @throws Error (the pool closed, a fork that failed).
  std::unique_ptr<PoolChild> acquire();
  /// Back to the idle ones, for the next task.
  void release(std::unique_ptr<PoolChild> child);
  /// Kills the child's process group and reaps the child: how it ended.
  ChildEnd discard(std::unique_ptr<PoolChild> child);
  /// Sends `sig` to the child's process group (through the fork server, which reaps it, so the
  /// pid is never another process's).
  void signal(const PoolChild& child, int sig);
  /// The child's dead man's switch: the fork server kills its group once `until` (lease_time;
  /// 0: none) passed.
  void set_deadline(const PoolChild& child, std::int64_t until) noexcept;
  /// No more children: idle ones leave now, the ones out when they are back, then the fork
  /// server.
  void close();

  pid_t server_pid() const;
  /// At most this many children at once.
  std::size_t capacity() const noexcept { return max_children_; }

 private:
  void start_server_locked();
  /// Closes the fork server's socket and reaps it, killed when it has not ended within
  /// `patience`.
  void stop_server_locked(std::chrono::milliseconds patience = std::chrono::seconds(3));
  /// One request to the fork server and its answer; nullopt when the fork server is gone.
  std::optional<Frame> ask_locked(FrameKind kind, const std::string& body, int* passed = nullptr);
  ChildEnd discard_locked(std::unique_ptr<PoolChild> child);

  const Registrations& handlers_;
  const std::size_t max_children_;
  std::atomic<std::int64_t>* deadlines_ = nullptr;  // max_children_ of them, shared with the fork server
  mutable std::mutex mutex_;
  int control_ = -1;
  pid_t server_ = -1;
  std::vector<std::unique_ptr<PoolChild>> idle_;
  std::vector<bool> slot_used_;
  std::size_t out_ = 0;
  bool closed_ = false;
};

/// The fork server's life (fork_server.cpp): serves `control` until the worker's end closes,
/// then kills what it started and leaves.
/// `worker` is the process it was forked from: once its parent is another, it leaves as well.
[[noreturn]] void serve_forks(int control, pid_t worker, const Registrations& handlers,
                              std::atomic<std::int64_t>* deadlines, std::size_t slots);

}  // namespace streamq::detail
