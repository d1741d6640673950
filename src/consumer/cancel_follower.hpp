// SPDX-License-Identifier: MIT
// The cancel follower: a thread that follows the cancels streams of the partition's levels
// (`<level stream>:cancels`, where cancel.lua pushes the id of each held entry an operator
// cancels) with XREAD BLOCK on a connection of its own, and asks the held tasks named there to
// stop at once (ask_cancelled). A push it misses (it was reconnecting, or the stream was trimmed
// past it) is found by the lease renewal, within heartbeat_interval; a reclaimed entry's cancel
// by the scripts that hand it out (fetch_pending.lua, start.lua).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "redis/connection.hpp"
#include "shared.hpp"

namespace streamq::detail {

class CancelFollower {
 public:
  explicit CancelFollower(Shared& shared) : s_(shared), conn_(shared.connection) {}
  ~CancelFollower();
  CancelFollower(const CancelFollower&) = delete;
  CancelFollower& operator=(const CancelFollower&) = delete;

  void start();
  /// Asks the thread to stop; a blocked XREAD returns only when someone sends
  /// CLIENT UNBLOCK <client_id()> (see Consumer shutdown) or its BLOCK runs out.
  void request_stop() noexcept;
  /// Waits up to `timeout` for the thread to leave its loop; true once it has.
  bool wait_finished(Millis timeout);
  void join();
  /// CLIENT ID of the connection the thread reads on (-1 before it connected).
  std::int64_t client_id() const noexcept { return client_id_.load(); }
  /// Connection::describe() of that connection: the server the id belongs to.
  std::string server() const {
    std::lock_guard lock(server_mutex_);
    return server_;
  }

 private:
  void main(const std::stop_token& stop);
  /// One XREAD over the levels' cancels streams from `positions`; asks the tasks named.
  void follow(std::vector<std::string>& positions);

  Shared& s_;
  Connection conn_;
  std::atomic<std::int64_t> client_id_{-1};
  mutable std::mutex server_mutex_;
  std::string server_;  // guarded by server_mutex_
  std::mutex finished_mutex_;
  std::condition_variable_any finished_cv_;
  bool finished_ = false;
  std::jthread thread_;
};

}  // namespace streamq::detail
