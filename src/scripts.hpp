// SPDX-License-Identifier: MIT
// The Lua scripts (contracts in scripts.cpp above each one) and how they are called:
// EVALSHA, falling back to EVAL when the server does not know the script (NOSCRIPT: after a
// restart, a failover or SCRIPT FLUSH).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"

namespace streamq::detail {

enum class ScriptId : std::size_t {
  enqueue,                // capacity-checked XADD of a batch
  move,                   // owner-checked retry copy / dead-letter, with XACK + XDEL of the original
  orphan,                 // provisional dead-letter record of an entry whose body was deleted while held
  replace,                // retry copy / dead-letter replacing a provisional dead-letter record
  lease,                  // owner-checked XCLAIM ... JUSTID (heartbeat, release)
  fetch_pending,          // reclaim of stalled entries or own-PEL replay, with poison and lost-body handling
  start,                  // owner-checked delivery count bump when a handler starts a reclaimed entry
  forget_idle_consumers,  // the janitor's check-and-delete of idle consumers without pending entries
  count_
};

/// Marks a pipelined command that is not a script call (for call_pipelined).
inline constexpr ScriptId not_a_script = ScriptId::count_;

/// Results of the `move` script.
inline constexpr std::int64_t move_not_pending = 0;  // already acked, deleted or never ours
inline constexpr std::int64_t move_not_owner = -1;   // another consumer owns the entry now

/// Results of the `start` script.
inline constexpr std::int64_t start_ok = 1;
inline constexpr std::int64_t start_not_owner = 0;
inline constexpr std::int64_t start_body_gone = -1;

const std::string& script_source(ScriptId id);
/// Lower-case hex SHA-1 of the script source (what EVALSHA takes).
const std::string& script_sha(ScriptId id);
/// SHA-1 of arbitrary bytes, lower-case hex (exposed for the unit test).
std::string sha1_hex(std::string_view data);

/// Runs scripts on one connection. Sends EVALSHA once the script is known to be cached on the
/// current connection, EVAL before that, and retries with EVAL on NOSCRIPT.
class ScriptRunner {
 public:
  explicit ScriptRunner(Connection& conn) : conn_(conn) {}

  /// Starts an argv for `id`: EVAL(SHA) <script> <numkeys>; append keys, then args.
  Argv begin(ScriptId id, int numkeys) const;
  /// Runs one script call built with begin(). Returns the reply (errors included).
  Reply call(ScriptId id, Argv& argv);
  /// Sends many commands in one pipeline; script calls (ids[i] != not_a_script) answered
  /// NOSCRIPT are re-run one by one with EVAL.
  std::vector<Reply> call_pipelined(const std::vector<ScriptId>& ids, std::vector<Argv>& argvs);
  /// The same in two halves, so the caller can build and flush commands while earlier ones
  /// run: append each command with Connection::append, then collect() reads the replies of
  /// all of them (argvs must still hold them, for NOSCRIPT re-runs).
  std::vector<Reply> collect(const std::vector<ScriptId>& ids, std::vector<Argv>& argvs);

 private:
  bool known(ScriptId id) const;
  void mark_known(ScriptId id);
  static bool is_noscript(const Reply& r);
  static void use_eval(ScriptId id, Argv& argv);

  Connection& conn_;
  std::array<std::uint64_t, static_cast<std::size_t>(ScriptId::count_)> known_generation_{};
};

}  // namespace streamq::detail
