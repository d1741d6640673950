// SPDX-License-Identifier: MIT
#include "pause_watch.hpp"

#include "log.hpp"

namespace streamq::detail {

void check_paused(Shared& s, Connection& conn) {
  const Reply r = conn.command(Argv{"EXISTS", s.keys().paused});
  if (r.view().is_error() && r.view().error().starts_with("NOPERM")) {
    // An ACL user set up before pausing existed: run on, unpaused, and say what to grant.
    if (s.pause.set(false) || !s.pause_unreadable.exchange(true)) {
      log(LogLevel::warning,
          "cannot read the pause flag " + s.keys().paused + " (" + std::string(r.view().error()) +
              "): this consumer ignores pause; grant its ACL user +exists on ~" + s.keys().paused);
    }
    return;
  }
  const bool now_paused = r.view().check().integer() == 1;
  if (s.pause.set(now_paused)) {
    log(LogLevel::info,
        "queue " + s.keys().stream +
            (now_paused ? " is paused: reading no new tasks" : " was resumed: reading tasks again"));
  }
}

void PauseWatch::tick(ScriptRunner& scripts, Clock::time_point now) {
  next_ = now + s_.opt.pause_check_interval;
  check_paused(s_, scripts.connection());
}

}  // namespace streamq::detail
