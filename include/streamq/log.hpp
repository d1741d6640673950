// SPDX-License-Identifier: MIT
#pragma once

#include <functional>
#include <string_view>

#include "streamq/export.hpp"

namespace streamq {

/// Severity of a library log line.
enum class LogLevel { debug, info, warning, error };

/// Receives every log line the library emits at or above the configured level. Called from
/// library threads (the Consumer's fetcher, handler, completer and scheduler threads)
/// concurrently: the function must be thread-safe. It must not throw.
using LogHandler = std::function<void(LogLevel level, std::string_view message)>;

/// Replace the process-wide log handler. An empty function restores the default, which writes
/// "streamq <level>: <message>" lines to stderr. Thread-safe.
STREAMQ_EXPORT void set_log_handler(LogHandler handler);

/// Lines below this level are not formatted nor delivered. Default: LogLevel::info.
/// Thread-safe.
STREAMQ_EXPORT void set_log_level(LogLevel level);

/// Text name of a level: "debug", "info", "warning", "error".
STREAMQ_EXPORT std::string_view to_string(LogLevel level) noexcept;

}  // namespace streamq
