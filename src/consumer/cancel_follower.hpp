// SPDX-License-Identifier: MIT
// The cancel follower: a thread that follows the cancels streams of the partition's levels
// (`<level stream>:cancels`, where cancel.lua pushes the id of each held entry an operator
// cancels) with XREAD BLOCK on a connection of its own, and asks the held tasks named there to
// stop at once (ask_cancelled). A push it misses (it was reconnecting, or the stream was trimmed
// past it) is found by the lease renewal, within heartbeat_interval; a reclaimed entry's cancel
// by the scripts that hand it out (fetch_pending.lua, start.lua).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "blocked_reader.hpp"
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
  /// Asks the thread to stop; a blocked XREAD returns only when someone sends CLIENT UNBLOCK
  /// to reader().client_id() (see Consumer shutdown) or its BLOCK runs out.
  void request_stop() noexcept { thread_.request_stop(); }
  /// Waits up to `timeout` for the thread to leave its loop; true once it has (or never ran).
  bool wait_finished(Millis timeout) { return !thread_.joinable() || reader_.wait_finished(timeout); }
  void join();
  /// The reading connection, for CLIENT UNBLOCK.
  const BlockedReader& reader() const noexcept { return reader_; }

 private:
  void main(const std::stop_token& stop);
  /// One XREAD over the levels' cancels streams from `positions`; asks the tasks named.
  void follow(std::vector<std::string>& positions);

  Shared& s_;
  Connection conn_;
  BlockedReader reader_;
  std::mutex pause_mutex_;
  std::condition_variable_any pause_cv_;  // the pause after an error, cut short by the stop
  std::jthread thread_;
};

}  // namespace streamq::detail
