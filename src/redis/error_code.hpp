// SPDX-License-Identifier: MIT
// The error code of a Redis error reply, also when Redis 6.2 wrapped it in a script error.
#pragma once

#include <string_view>

namespace streamq::detail {

/// The code of an error reply's text: its first word ("WRONGTYPE", "OOM", "NOGROUP", ...).
/// Redis < 7.0 reports an error raised inside a script as
/// `ERR Error running script (call to f_<sha>): @user_script:<line>: <error>`, where <error>
/// is the command's error (`WRONGTYPE ...`), or `@user_script: <line>: -OOM ...` for the
/// checks Redis makes before running a command (OOM, ACL, unknown command); for those the
/// code is taken from <error>, as Redis 7.0 reports it. A Lua runtime error there
/// (`user_script:3: attempt to ...`) has no code of its own: "ERR".
std::string_view error_code(std::string_view message) noexcept;
/// The error a Redis 6.2 script error wraps (`WRONGTYPE Operation against ...` out of
/// `ERR Error running script (call to f_<sha>): @user_script:12: WRONGTYPE Operation ...`),
/// so that an error reads the same on every server version; any other text as it is.
std::string_view unwrap_script_error(std::string_view message) noexcept;

}  // namespace streamq::detail
