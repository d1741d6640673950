// SPDX-License-Identifier: MIT
// Times typed on the command line (`--start 2027-01-07T09:00:00+01:00`): ISO 8601 with a zone.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace streamq::cli {

/// `YYYY-MM-DDTHH:MM[:SS[.fff]]` followed by `Z` or an offset `+HH:MM` / `-HH:MM` (a space may
/// stand for the T); nullopt for anything else, a time without its zone included (whose zone
/// would be a guess).
std::optional<std::chrono::system_clock::time_point> parse_iso_time(std::string_view text);

}  // namespace streamq::cli
