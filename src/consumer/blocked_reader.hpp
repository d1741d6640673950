// SPDX-License-Identifier: MIT
// What stopping a thread that blocks in a read on a connection of its own (the fetcher's
// XREADGROUP, the cancel follower's XREAD, both with BLOCK) takes: the reading connection's
// CLIENT ID and server, for a CLIENT UNBLOCK sent from another connection, and whether the
// thread left its loop. The reading thread reports; the stopping thread asks (Consumer shutdown:
// unblock until finished).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "redis/backoff.hpp"
#include "redis/connection.hpp"

namespace streamq::detail {

class BlockedReader {
 public:
  /// The reading thread (re)connected `conn`.
  void connected(const Connection& conn) {
    {
      std::lock_guard lock(mutex_);
      server_ = conn.describe();
    }
    client_id_.store(conn.client_id());
  }
  /// The reading thread left its loop.
  void finished() {
    {
      std::lock_guard lock(mutex_);
      finished_ = true;
    }
    cv_.notify_all();
  }
  /// Waits up to `timeout` for finished(); true once it was.
  bool wait_finished(Millis timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return finished_; });
  }
  /// CLIENT ID of the reading connection (-1 before it connected).
  std::int64_t client_id() const noexcept { return client_id_.load(); }
  /// Connection::describe() of that connection: the server the id belongs to.
  std::string server() const {
    std::lock_guard lock(mutex_);
    return server_;
  }

 private:
  std::atomic<std::int64_t> client_id_{-1};
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::string server_;     // guarded by mutex_
  bool finished_ = false;  // guarded by mutex_
};

}  // namespace streamq::detail
