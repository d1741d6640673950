// SPDX-License-Identifier: MIT
// Who holds a consumer name: the value of its liveness key (live_key(), written by
// consumer/name_lock.cpp through name.lua), "<client id> <token> <ms written>", and whether the
// process that wrote it is still there. The one check of a holder's liveness: a consumer taking
// a name over and the Inspector saying whether a task's holder runs both decide by it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace streamq::detail {

class Connection;

/// A liveness key's value, parsed.
struct NameHolder {
  std::string client_id;        // the Redis client id of the connection that renews it (digits)
  std::string token;            // the run's token
  std::int64_t written_ms = 0;  // the server's time of the last write
};

/// Parses "<client id> <token> <ms written>"; nullopt for a value streamq did not write.
std::optional<NameHolder> parse_name_holder(std::string_view value);

/// What a look at a holder found.
struct HolderLook {
  enum class State {
    live,     // its client is connected and could be the one that wrote the value
    gone,     // its connection is closed (the process died or was killed), or the id is another
              // client's now (client ids start again from 1 after a server restart)
    unknown,  // this user may not run CLIENT LIST (NOPERM)
  };
  State state = State::unknown;
  std::string client;  // live: "client <id> from <addr>, named <name>", for messages
};

/// One look at every holder at once: one `CLIENT LIST ID <id>...` on `conn` (the connection that
/// read the values: its server is theirs). `now_ms`: the server's time when the values were read.
/// A looks[i] per holders[i]; each is unknown (and `why_unknown` set to the server's refusal)
/// when this user may not look. Throws what the connection throws, and ReplyError for any other
/// refusal.
std::vector<HolderLook> look_at_holders(Connection& conn, const std::vector<NameHolder>& holders,
                                        std::int64_t now_ms, std::string* why_unknown = nullptr);

}  // namespace streamq::detail
