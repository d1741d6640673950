// SPDX-License-Identifier: MIT
#include "scripts.hpp"

namespace streamq::detail {

const EmbeddedScript& embedded(ScriptId id) noexcept {
  return embedded_scripts[static_cast<std::size_t>(id)];
}

std::string_view script_source(ScriptId id) noexcept { return embedded(id).source; }
std::string_view script_sha(ScriptId id) noexcept { return embedded(id).sha1; }
std::string_view script_name(ScriptId id) noexcept { return embedded(id).name; }

bool ScriptRunner::known(ScriptId id) const {
  // On a cluster every master has a script cache of its own, and the command's keys (not known
  // yet here) pick the master: EVALSHA always, and EVAL where a master answers NOSCRIPT.
  if (conn_.config().endpoint.is_cluster()) return true;
  return known_generation_[static_cast<std::size_t>(id)] == conn_.generation() && conn_.connected();
}

void ScriptRunner::mark_known(ScriptId id) {
  known_generation_[static_cast<std::size_t>(id)] = conn_.generation();
}

Argv ScriptRunner::begin(ScriptId id, int numkeys) const {
  Argv argv;
  if (known(id)) {
    argv.add("EVALSHA").add(script_sha(id));
  } else {
    argv.add("EVAL").add(script_source(id));
  }
  argv.add(static_cast<std::int64_t>(numkeys));
  return argv;
}

Argv ScriptRunner::begin_shared(ScriptId id, int numkeys) {
  Argv argv;
  argv.add("EVALSHA").add(script_sha(id)).add(static_cast<std::int64_t>(numkeys));
  return argv;
}

void ScriptRunner::choose_head(ScriptId id, Argv& argv) const {
  if (known(id)) {
    argv.set(0, "EVALSHA");
    argv.set(1, script_sha(id));
  } else {
    use_eval(id, argv);
  }
}

void ScriptRunner::note_reply(ScriptId id, const Reply& reply) {
  if (!is_noscript(reply)) {
    mark_known(id);
  } else {
    known_generation_[static_cast<std::size_t>(id)] = 0;  // (SCRIPT FLUSH) EVAL next time
  }
}

bool ScriptRunner::is_noscript(const Reply& r) {
  return r.view().is_error() && r.view().error().starts_with("NOSCRIPT");
}

void ScriptRunner::use_eval(ScriptId id, Argv& argv) {
  argv.set(0, "EVAL");
  argv.set(1, script_source(id));
}

Reply ScriptRunner::call(ScriptId id, Argv& argv) {
  // A due sentinel recheck happens here, where a move to another master is safe (the NOSCRIPT
  // below covers the script cache there), not inside the command.
  conn_.recheck_master();
  Reply r = conn_.command(argv);
  if (is_noscript(r)) {
    use_eval(id, argv);
    r = conn_.command(argv);
  }
  if (!r.view().is_error() || !is_noscript(r)) mark_known(id);
  return r;
}

std::vector<Reply> ScriptRunner::call_pipelined(const std::vector<ScriptId>& ids, std::vector<Argv>& argvs) {
  for (const Argv& argv : argvs) conn_.append(argv);
  return collect(ids, argvs);
}

std::vector<Reply> ScriptRunner::collect(const std::vector<ScriptId>& ids, std::vector<Argv>& argvs,
                                         bool rerun_noscript) {
  std::vector<Reply> replies;
  replies.reserve(argvs.size());
  const std::uint64_t generation = conn_.generation();
  for (std::size_t i = 0; i < argvs.size(); ++i) replies.push_back(conn_.read_reply());
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (ids[i] == not_a_script) continue;
    if (!rerun_noscript && is_noscript(replies[i])) continue;
    // Not re-run on another connection than the one that read the pipeline (a reply there
    // said the server stopped being the master): what comes after a refused script must not
    // be written where the refused one was not. The NOSCRIPT reply stands.
    // (On a cluster the re-run goes to the master of the script's keys, the one that refused it.)
    const bool cluster = conn_.config().endpoint.is_cluster();
    if (is_noscript(replies[i]) && !cluster && (!conn_.connected() || conn_.generation() != generation))
      continue;
    if (is_noscript(replies[i])) {
      use_eval(ids[i], argvs[i]);
      replies[i] = cluster ? conn_.command(argvs[i]) : conn_.command_here(argvs[i]);
    }
    mark_known(ids[i]);
  }
  return replies;
}

}  // namespace streamq::detail
