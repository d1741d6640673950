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

namespace streamq::detail {

/// Marks a pipelined command that is not a script call (for call_pipelined).
inline constexpr ScriptId not_a_script = ScriptId::count_;

/// The script's text, includes expanded (what EVAL sends).
std::string_view script_source(ScriptId id) noexcept;
/// Lower-case hex SHA-1 of the script's text (what EVALSHA sends), computed at build time.
std::string_view script_sha(ScriptId id) noexcept;
/// The script's name: its file under src/lua without ".lua".
std::string_view script_name(ScriptId id) noexcept;

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
  /// Starts an argv for `id` as begin() does, for a caller on another thread than the one that
  /// writes it (SharedConnection): EVALSHA, until choose_head() picks the head on the writer's.
  static Argv begin_shared(ScriptId id, int numkeys);
  /// On the writing thread, just before the command is appended: EVAL when the script is not
  /// known to be cached on the connection (see begin()).
  void choose_head(ScriptId id, Argv& argv) const;
  /// After reading the reply of a script call: a reply other than NOSCRIPT means the script is
  /// cached on this connection now; NOSCRIPT, that it is not (a SCRIPT FLUSH): begin() sends
  /// EVAL again.
  void note_reply(ScriptId id, const Reply& reply);
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
