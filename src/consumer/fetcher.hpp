// SPDX-License-Identifier: MIT
// The fetcher: brings new work in. Owns one thread and one connection. After every connect
// it first replays this consumer's own pending entries of every priority level (they were
// delivered to this name before, and nobody else takes them until they idle past
// claim_min_idle); then it reads with XREADGROUP whenever the in-flight set has room, the
// levels and counts of each read chosen by its LevelOrder (level_order.hpp; BLOCK only when
// every level was found drained), writing the successes that finished meanwhile ahead of
// each read (one round trip per batch, as a bare loop would) and the dispatch of the tenants'
// tasks whose turn it is (tenant_dispatch.hpp), and recreates a group (at id 0)
// if it was deleted. Talks to: the in-flight set (deliver, room, acks), Redis.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "blocked_reader.hpp"
#include "completer.hpp"
#include "level_order.hpp"
#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "shared.hpp"
#include "tenant_dispatch.hpp"

namespace streamq::detail {

/// XGROUP CREATE <stream> <group> 0 MKSTREAM; an existing group is fine (also when a full
/// server refuses the command with OOM before it sees the group exists).
void ensure_group(Connection& conn, const std::string& stream, const std::string& group);
/// ensure_group() for a consumer's start, on every level stream of a queue (or partition) at
/// once: throws ConfigError naming the other group when one of `streams` has one (streamq runs
/// one group per queue: a success deletes its entry), else creates `group` where it is missing
/// (with `create`; without, it only checks). One script, so a refused start creates nothing.
/// False when the user may not run XINFO GROUPS, so that nothing was checked (the group is
/// created all the same).
bool ensure_only_group(Connection& conn, const std::vector<QueueKeys>& streams, const std::string& group,
                       bool create);

class Fetcher {
 public:
  /// `on_first_replay` is called once, after the first replay of this consumer's own entries
  /// (the reclaimer waits for it, or both would fetch the entries a previous run left).
  Fetcher(Shared& shared, std::function<void()> on_first_replay);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  void start();
  /// Asks the thread to stop; a blocked XREADGROUP returns only when someone sends CLIENT
  /// UNBLOCK to reader().client_id() (see Consumer shutdown) or BLOCK runs out.
  void request_stop() noexcept;
  /// Waits up to `timeout` for the thread to leave its loop; true once it has (or never ran).
  bool wait_finished(Millis timeout) { return !thread_.joinable() || reader_.wait_finished(timeout); }
  void join();
  /// The reading connection, for CLIENT UNBLOCK.
  const BlockedReader& reader() const noexcept { return reader_; }
  bool replayed_once() const noexcept { return replayed_once_.load(); }

 private:
  void main(const std::stop_token& stop);
  void replay_own(const std::stop_token& stop);
  /// One request: the successes that finished (MULTI ... EXEC), then an XREADGROUP for what
  /// the in-flight set has room for, given `in_hand` entries read but not yet delivered.
  /// False when there was nothing to send.
  bool send(std::size_t in_hand);
  /// Reads the replies of the oldest request and delivers what it read (after sending the
  /// next request). False when the caller should back off.
  bool receive(const std::stop_token& stop);
  /// Forgets the requests in flight (their successes go to the completer) and the connection.
  void drop_requests() noexcept;
  /// Counts and forgets acknowledged entries, or hands them to the completer.
  void acked(std::vector<EntryKey>& acks, const std::string& error);
  /// Appends one XREADGROUP over `levels` (COUNT `count`, BLOCK `block` when given).
  void append_read(std::vector<Argv>& argvs, const std::vector<std::uint16_t>& levels, std::size_t count,
                   std::optional<Millis> block) const;
  /// Waits `delay` unless a stop comes first; false when stopping.
  bool pause(const std::stop_token& stop, Millis delay);

  Shared& s_;
  std::function<void()> on_first_replay_;
  Connection conn_;
  ScriptRunner scripts_;
  struct AckBlock {
    std::vector<EntryKey> acks;  // the successes of one level it acknowledges
    AckSpan at;                  // where its commands are among the request's
  };
  struct Request {
    std::vector<AckBlock> blocks;  // one per level with successes, first in the pipeline
    ReadPlan plan;                 // then the tenants' dispatch and its reads: the probe (if
    std::size_t count = 0;         // any), the main read; entries they may bring (0: no read)
    bool dispatched = false;       // whether the dispatch was sent
  };
  const std::size_t read_batch_;  // entries per read: half the prefetch, so two fit
  LevelOrder order_;              // which levels each read asks
  std::deque<Request> requests_;  // sent, replies not yet read (two at most)
  std::size_t reserved_ = 0;      // entries the reads in flight may still bring
  bool group_gone_ = false;       // recreate the group once the pipeline is drained
  TenantDispatch dispatch_;       // ahead of every read
  std::vector<Work> works_;       // reused between reads
  BlockedReader reader_;
  std::atomic<bool> replayed_once_{false};
  std::jthread thread_;
};

}  // namespace streamq::detail
