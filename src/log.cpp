// SPDX-License-Identifier: MIT
#include "log.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "redis/reply.hpp"
#include "streamq/errors.hpp"

namespace streamq {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
std::mutex g_mutex;  // guards g_handler and serialises stderr lines
std::shared_ptr<const LogHandler> g_handler;

}  // namespace

void set_log_handler(LogHandler handler) {
  std::lock_guard lock(g_mutex);
  g_handler = handler ? std::make_shared<const LogHandler>(std::move(handler)) : nullptr;
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "unknown";
}

namespace detail {

LogLevel retry_level(const std::exception& e) noexcept {
  if (dynamic_cast<const ConnectionError*>(&e) != nullptr) return LogLevel::warning;
  if (dynamic_cast<const ReplyError*>(&e) != nullptr && is_transient_error(e.what()))
    return LogLevel::warning;
  return LogLevel::error;
}

bool log_enabled(LogLevel level) noexcept {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void silence_log() noexcept { g_level.store(static_cast<int>(LogLevel::error) + 1); }

void log(LogLevel level, std::string_view message) noexcept {
  if (!log_enabled(level)) return;
  std::shared_ptr<const LogHandler> handler;
  {
    std::lock_guard lock(g_mutex);
    handler = g_handler;
    if (!handler) {
      const auto name = to_string(level);
      std::fprintf(stderr, "streamq %.*s: %.*s\n", static_cast<int>(name.size()), name.data(),
                   static_cast<int>(message.size()), message.data());
      return;
    }
  }
  try {
    (*handler)(level, message);
  } catch (...) {
    // A throwing log handler must not take a worker thread down; there is nowhere to report it.
  }
}

}  // namespace detail
}  // namespace streamq
