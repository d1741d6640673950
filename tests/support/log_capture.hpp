// SPDX-License-Identifier: MIT
// Collects streamq's log lines while it lives; restores the default handler and level after.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <streamq/log.hpp>

namespace streamq::test {

class LogCapture {
 public:
  explicit LogCapture(LogLevel level) {
    set_log_level(level);
    set_log_handler([this](LogLevel l, std::string_view message) {
      std::lock_guard lock(m_);
      lines_.emplace_back(l, std::string(message));
    });
  }
  ~LogCapture() {
    set_log_handler({});
    set_log_level(LogLevel::info);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::vector<std::pair<LogLevel, std::string>> lines() {
    std::lock_guard lock(m_);
    return lines_;
  }
  /// Lines at `level` that contain `text`.
  std::size_t count(LogLevel level, std::string_view text) {
    std::size_t n = 0;
    for (const auto& [l, line] : lines()) n += l == level && line.find(text) != std::string::npos;
    return n;
  }

 private:
  std::mutex m_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
};

}  // namespace streamq::test
