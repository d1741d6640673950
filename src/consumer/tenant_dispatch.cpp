// SPDX-License-Identifier: MIT
// The dispatch of tenants' tasks ahead of each read. See tenant_dispatch.hpp.
#include "tenant_dispatch.hpp"

#include <algorithm>
#include <string>

#include "log.hpp"

namespace streamq::detail {

namespace {

/// Whether a script's error says that this user may not run one of its commands or touch one
/// of its keys: NOPERM, or, from a command inside the script, "The user executing the script
/// can't ..." (Redis 7) or "ACL failure in script" (Valkey 8).
bool refused_by_acl(std::string_view error) {
  return error.find("NOPERM") != std::string_view::npos ||
         error.find("user executing the script can't") != std::string_view::npos ||
         error.find("ACL failure in script") != std::string_view::npos;
}

}  // namespace

Argv TenantDispatch::call(std::size_t count) {
  last_call_ = std::chrono::steady_clock::now();
  // (On a cluster the runner always starts with EVALSHA: after a NOSCRIPT, EVAL once.)
  Argv argv;
  if (eval_next_) {
    argv.add("EVAL").add(script_source(ScriptId::tenants_dispatch)).add(1);
  } else {
    argv = scripts_.begin(ScriptId::tenants_dispatch, 1);
  }
  argv.add(s_.keys().stream);
  argv.add(static_cast<std::int64_t>(count)).add(static_cast<std::int64_t>(s_.opt.claim_min_idle.count()));
  argv.add(s_.opt.group);
  return argv;
}

void TenantDispatch::read_reply(Connection& conn) {
  const Reply reply = conn.read_reply();
  scripts_.note_reply(ScriptId::tenants_dispatch, reply);
  const ReplyView r = reply.view();
  if (r.is_array() && r.size() == 3 && r[1].is_integer() && r[2].is_integer()) {
    next_due_ms_ = r[1].integer();
    active_ = r[2].integer() == 1;
    eval_next_ = false;
    return;
  }
  next_due_ms_ = -1;
  active_ = false;
  eval_next_ = ScriptRunner::is_noscript(reply);
  if (eval_next_) return;  // (sent with EVAL next time)
  if (r.is_error() && refused_by_acl(r.error())) {
    off_ = true;
    log(LogLevel::warning, "tenants' dispatch of " + s_.keys().stream +
                               " off: this worker's ACL user may not run it (" + std::string(r.error()) +
                               "); tasks that name a tenant wait in their backlogs (see the ACL lines in "
                               "docs/operations.md)");
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - last_error_log_ < std::chrono::minutes(1)) return;
  last_error_log_ = now;
  const std::string what = r.is_error() ? std::string(r.error()) : std::string("an unexpected reply");
  log(LogLevel::error, "dispatching the tenants' tasks of " + s_.keys().stream + ": " + what +
                           "; tasks that name a tenant wait in their backlogs (see docs/tenants.md)");
}

Millis TenantDispatch::block_for(Millis block, bool dispatched) const {
  if (active_) block = std::min(block, kPoll);
  if (!dispatched && !off_) {
    const auto left =
        kPoll - std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - last_call_);
    block = std::min(block, std::max(left, Millis(1)));
  }
  if (next_due_ms_ < 0) return block;
  return std::clamp(Millis(next_due_ms_), Millis(1), block);
}

}  // namespace streamq::detail
