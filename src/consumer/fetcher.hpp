// SPDX-License-Identifier: MIT
// The fetcher: brings new work in. Owns one thread and one connection. After every connect
// it first replays this consumer's own pending entries (they were delivered to this name
// before, and nobody else takes them until they idle past claim_min_idle); then it reads
// with XREADGROUP ... BLOCK whenever the in-flight set has room, writing the successes that
// finished meanwhile ahead of each read (one round trip per batch, as a bare loop would),
// and recreates the group (at id 0) if it was deleted. Talks to: the in-flight set
// (deliver, room, acks), Redis.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "connection.hpp"
#include "scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

/// XGROUP CREATE <stream> <group> 0 MKSTREAM; an existing group is fine.
void ensure_group(Connection& conn, const std::string& stream, const std::string& group);

class Fetcher {
 public:
  /// `on_first_replay` is called once, after the first replay of this consumer's own entries
  /// (the reclaimer waits for it, or both would fetch the entries a previous run left).
  Fetcher(Shared& shared, std::function<void()> on_first_replay);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  void start();
  /// Asks the thread to stop; a blocked XREADGROUP returns only when someone sends
  /// CLIENT UNBLOCK <client_id()> (see Consumer shutdown) or BLOCK runs out.
  void request_stop() noexcept;
  /// Waits up to `timeout` for the thread to leave its loop; true once it has.
  bool wait_finished(Millis timeout);
  void join();
  /// CLIENT ID of the connection the thread reads on (-1 before it connected).
  std::int64_t client_id() const noexcept { return client_id_.load(); }
  bool replayed_once() const noexcept { return replayed_once_.load(); }

 private:
  void main(const std::stop_token& stop);
  void replay_own(const std::stop_token& stop);
  /// Acknowledges the successes waiting and reads more (one pipeline); false when the caller
  /// should back off (the group was recreated).
  bool read();
  /// Counts and forgets the acknowledged entries, or hands them to the completer.
  void acked(const std::string& error);
  /// Waits `delay` unless a stop comes first; false when stopping.
  bool pause(const std::stop_token& stop, Millis delay);

  Shared& s_;
  std::function<void()> on_first_replay_;
  Connection conn_;
  ScriptRunner scripts_;
  const std::string block_text_;
  std::vector<Work> works_;     // reused between reads
  std::vector<EntryKey> acks_;  // successes acknowledged by the current pipeline
  std::atomic<std::int64_t> client_id_{-1};
  std::atomic<bool> replayed_once_{false};
  std::mutex finished_mutex_;
  std::condition_variable finished_cv_;
  bool finished_ = false;
  std::jthread thread_;
};

}  // namespace streamq::detail
