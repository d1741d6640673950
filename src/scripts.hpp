// SPDX-License-Identifier: MIT
// The Lua scripts (src/lua/<name>.lua, embedded at build time; each file's header is its
// contract) and how they are called:
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
#include "lua_scripts.hpp"
#include "streamq/task.hpp"

namespace streamq::detail {

/// Marks a pipelined command that is not a script call (for call_pipelined).
inline constexpr ScriptId not_a_script = ScriptId::count_;

/// Results of the `move` script.
inline constexpr std::int64_t move_not_pending = 0;  // already acked, deleted or never ours
inline constexpr std::int64_t move_not_owner = -1;   // another consumer owns the entry now

/// Results of the `start` script.
inline constexpr std::int64_t start_ok = 1;
inline constexpr std::int64_t start_not_owner = 0;
inline constexpr std::int64_t start_body_gone = -1;

/// The script's text, includes expanded (what EVAL sends).
std::string_view script_source(ScriptId id) noexcept;
/// Lower-case hex SHA-1 of the script's text (what EVALSHA sends), computed at build time.
std::string_view script_sha(ScriptId id) noexcept;
/// The script's name: its file under src/lua without ".lua".
std::string_view script_name(ScriptId id) noexcept;

/// What a dead-letter or retry write tells the Lua that writes it (write_fate() in
/// src/lua/lib/fate.lua): appends 'retry', `queue` and the copy's fields, or 'dead_letter', the
/// reason, error, failed_at, the most fields a dead-letter entry keeps, `queue` and the fields
/// read. `queue` is the queue's stream name (a partition's, ConsumerOptions::stream): a tracked
/// task's record `<queue>:task:<task_id>` says what became of it (lib/track.lua), and when the
/// fields read have a unique_key, the dead letter releases the lock `<queue>:unique:<unique_key>`
/// if it still holds the task's id; "" leaves both alone (a provisional record whose task still
/// runs).
void append_retry(Argv& argv, std::string_view queue, const Fields& copy);
/// The same for a copy that waits in the delayed set for `delay` (by the server's clock) and
/// then goes to `stream`: 'delay', the delay in ms, the member's nonce, the stream, `queue`, the
/// fields; 'hold' instead of 'delay' when it was not `attempted` (put back unrun by a rate
/// limit: a tracked task's record says delayed, not retrying).
void append_delayed_retry(Argv& argv, Millis delay, std::string nonce, std::string_view stream,
                          std::string_view queue, const Fields& copy, bool attempted = true);
void append_dead_letter(Argv& argv, std::string_view reason, std::string_view error,
                        std::string_view failed_at, std::string_view queue, const Fields& fields_read);

/// Runs scripts on one connection. Sends EVALSHA once the script is known to be cached on the
/// current connection, EVAL before that, and retries with EVAL on NOSCRIPT. With a cluster URL
/// (one cache per master) it always sends EVALSHA first.
class ScriptRunner {
 public:
  explicit ScriptRunner(Connection& conn) : conn_(conn) {}
  /// The connection it runs on (for plain commands between script calls).
  Connection& connection() const noexcept { return conn_; }

  /// Starts an argv for `id`: EVAL(SHA) <script> <numkeys>; append keys, then args.
  Argv begin(ScriptId id, int numkeys) const;
  /// Runs one script call built with begin(). Returns the reply (errors included).
  Reply call(ScriptId id, Argv& argv);
  /// Whether the server did not know the script (EVALSHA answered NOSCRIPT).
  static bool is_noscript(const Reply& r);
  /// Sends many commands in one pipeline; script calls (ids[i] != not_a_script) answered
  /// NOSCRIPT are re-run one by one with EVAL.
  std::vector<Reply> call_pipelined(const std::vector<ScriptId>& ids, std::vector<Argv>& argvs);
  /// The same in two halves, so the caller can build and flush commands while earlier ones
  /// run: append each command with Connection::append, then collect() reads the replies of
  /// all of them (argvs must still hold them, for NOSCRIPT re-runs).
  /// Without `rerun_noscript`, a NOSCRIPT reply is returned as it is, for a caller whose
  /// pipelined calls depend on their order (the commands behind a refused one have run).
  std::vector<Reply> collect(const std::vector<ScriptId>& ids, std::vector<Argv>& argvs,
                             bool rerun_noscript = true);

 private:
  bool known(ScriptId id) const;
  void mark_known(ScriptId id);
  static void use_eval(ScriptId id, Argv& argv);

  Connection& conn_;
  std::array<std::uint64_t, static_cast<std::size_t>(ScriptId::count_)> known_generation_{};
};

}  // namespace streamq::detail
