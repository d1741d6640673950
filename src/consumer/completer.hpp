// SPDX-License-Identifier: MIT
// The completer: writes what became of each entry. Owns one thread and one connection, and is
// the only part that decides an entry's fate in Redis, so those decisions happen in one
// order: tracked tasks' start marks first, many per running script call, then their reports
// (report_box.hpp); successes as one
// MULTI of XACK + XDEL per batch, tracked ones (and cancelled ones) many per done script call;
// retries and dead letters each with the owner-checked move script; orphan records (the body was deleted
// while held) with the orphan script; completions of orphaned entries with the replace script. A write
// refused by a passing server state (LOADING after a restart, OOM under noeviction, a failover) is retried
// with backoff while the entries stay held and leased; counters count only what was written. Talks to: the
// in-flight set, Redis.
#pragma once

#include <thread>
#include <vector>

#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "shared.hpp"

namespace streamq::detail {

/// Successes of orphaned entries: their provisional records, and the entry ids they stand for.
struct OrphanAcks {
  std::vector<std::string_view> records;
  std::vector<std::string_view> entries;
};

/// Where append_acks put a block: the index of its first and last command, and whether they
/// are MULTI and EXEC.
struct AckSpan {
  std::size_t first = 0;
  std::size_t last = 0;
  bool transaction = true;
};

/// Appends MULTI, XACK + XDEL of `ids` (if any), the deletion of `orphans`' provisional
/// records and their index fields (if any), the release of `locks` (if any: EVAL of the
/// release script), EXEC: the acknowledgement of successes of one stream. MULTI: a crash
/// between XACK and XDEL would leave a done entry counting toward max_len, and one between
/// the ack and the release would keep a finished task's lock until it expires. The release is
/// an EVAL, not an EVALSHA: inside a MULTI a NOSCRIPT would only show in EXEC's reply, after
/// the acks it cannot be retried with. Without `transaction` (acks_in_multi() false: a server
/// over maxmemory) the same commands go without MULTI/EXEC, XACK before XDEL: a crash between
/// them leaves a done, acknowledged entry in the stream, never one pending without its body.
/// Every block of one pipeline must use the same `transaction` (a refused EXEC leaves the
/// connection inside the MULTI, where plain commands would only be queued). The views must
/// outlive the pipeline.
AckSpan append_acks(std::vector<Argv>& argvs, const Shared& s, std::uint16_t stream,
                    const std::vector<std::string_view>& ids, const OrphanAcks& orphans,
                    const std::vector<const UniqueLock*>& locks, bool transaction);
/// Whether acknowledgements go in MULTI now (see Shared::acks_without_multi_until).
bool acks_in_multi(const Shared& s);
/// The error that refused such a block (the refused command's, not EXECABORT), "" if written.
std::string acks_error(const std::vector<Reply>& replies, const AckSpan& block);
/// True when EXEC itself was refused (a busy server refuses it as it refuses XACK), which
/// leaves the connection inside the MULTI: the caller must drop the connection.
bool exec_refused(const std::vector<Reply>& replies, const AckSpan& block);
/// Records what a block's `error` says about the server's memory (Shared::acks_without_multi).
void note_acks(Shared& s, const AckSpan& block, const std::string& error);

class Completer {
 public:
  explicit Completer(Shared& shared);
  ~Completer();
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void start();
  /// Writes everything queued, retrying passing errors until `deadline`, then returns.
  void finish(Clock::time_point deadline);
  /// finish() in two halves, so that several completers (one per partition) write their last
  /// completions at the same time: request_finish() tells the thread, join() waits for it.
  void request_finish(Clock::time_point deadline);
  void join();

 private:
  void main(const std::stop_token& stop);
  /// Writes `more` (start marks, then reports) and `batch`; what must be retried stays in them.
  /// Throws ConnectionError.
  void flush(std::vector<Completion>& batch, InFlight::Writes& more);

  Shared& s_;
  Connection conn_;
  ScriptRunner scripts_;
  std::atomic<Clock::rep> deadline_{Clock::time_point::max().time_since_epoch().count()};
  std::jthread thread_;
};

}  // namespace streamq::detail
