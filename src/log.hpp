// SPDX-License-Identifier: MIT
#pragma once

#include <exception>
#include <string_view>

#include "streamq/log.hpp"

namespace streamq::detail {

/// True when a line at `level` would be delivered (check before building an expensive message).
bool log_enabled(LogLevel level) noexcept;
/// Delivers one line to the user's handler (or stderr). Never throws.
void log(LogLevel level, std::string_view message) noexcept;
/// From now on nothing is logged in this process: a child forked by the process executor, where
/// the log's lock may have been held by another thread of the worker at the fork.
void silence_log() noexcept;

/// The level for an error a loop will retry: warning when it is a passing server state (see
/// is_transient_error) or a lost connection, error otherwise.
LogLevel retry_level(const std::exception& e) noexcept;

}  // namespace streamq::detail
