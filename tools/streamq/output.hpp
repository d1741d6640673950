// SPDX-License-Identifier: MIT
// What the streamq command prints: tables (control characters escaped, long cells cut) or
// JSON, progress lines on a terminal, confirmations, and the exit statuses scripts rely on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace streamq::cli {

/// Exit statuses (docs/cli-and-dashboard.md, "The streamq command").
enum Exit : int {
  ok = 0,
  failed = 1,     ///< the server refused, or could not be reached
  usage = 2,      ///< bad arguments
  not_found = 3,  ///< no such task (or schedule)
  unsafe = 4,     ///< doctor: something would lose tasks
  aborted = 5,    ///< not confirmed, or interrupted (what was done is reported)
};

/// Set by SIGINT/SIGTERM once install_interrupt_handler() ran; bulk actions stop between batches.
extern std::atomic<bool> interrupted;
void install_interrupt_handler();

/// A cell for a terminal: control characters (ANSI escapes included) as \xNN, and at most
/// `width` characters (… marks a cut); payloads can hold anything.
std::string cell(std::string_view text, std::size_t width = 60);

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

/// Asks "<question> [y/N]" on the terminal. Without a terminal it answers no and says to pass --yes.
bool confirm(const std::string& question);

/// "count, rate, ETA" on one rewritten stderr line, only when stderr is a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(std::string what);
  void update(std::int64_t done, std::int64_t total);
  void finish();

 private:
  std::string what_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_{};
  bool shown_ = false;
};

std::string ms_text(std::int64_t ms);
/// A time in ms since the Unix epoch as ISO 8601 UTC with milliseconds, `2026-11-29T18:00:00.123Z`
/// (the tables' one form of a time; JSON output keeps the ms).
std::string utc_text(std::int64_t ms_since_epoch);

}  // namespace streamq::cli
