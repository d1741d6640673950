// SPDX-License-Identifier: MIT
#include "output.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <iostream>

namespace streamq::cli {

std::atomic<bool> interrupted{false};

namespace {
extern "C" void on_interrupt(int) { interrupted.store(true); }
}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

std::string cell(std::string_view text, std::size_t width) {
  std::string out;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) ++chars;  // count UTF-8 sequences, not bytes
    if (chars > width) {
      out += "…";
      break;
    }
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string Table::str() const {
  std::vector<std::size_t> widths;
  const auto length = [](const std::string& s) {
    std::size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
    return n;
  };
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], length(row[i]));
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - length(row[i]) + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

bool confirm(const std::string& question) {
  if (!isatty(STDIN_FILENO)) {
    std::cerr << "streamq: " << question << " Refused: not a terminal; pass --yes to do it without asking\n";
    return false;
  }
  std::cerr << question << " [y/N] " << std::flush;
  std::string answer;
  if (!std::getline(std::cin, answer)) return false;
  return answer == "y" || answer == "Y" || answer == "yes";
}

ProgressLine::ProgressLine(std::string what)
    : what_(std::move(what)), tty_(isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

void ProgressLine::update(std::int64_t done, std::int64_t total) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_ < std::chrono::milliseconds(200) && done < total) return;
  last_ = now;
  shown_ = true;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  std::string line = "\r" + what_ + " " + std::to_string(done);
  if (total > 0) line += " of " + std::to_string(total);
  char buf[96];
  std::snprintf(buf, sizeof buf, " (%.0f/s", rate);
  line += buf;
  if (total > done && rate > 0) {
    std::snprintf(buf, sizeof buf, ", ETA %.0f s", static_cast<double>(total - done) / rate);
    line += buf;
  }
  line += ")   ";
  std::cerr << line << std::flush;
}

void ProgressLine::finish() {
  if (tty_ && shown_) std::cerr << "\n";
}

std::string utc_text(std::int64_t ms_since_epoch) {
  const std::time_t seconds = static_cast<std::time_t>(ms_since_epoch / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[96];  // (room for any int the fields could hold)
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(ms_since_epoch % 1000));
  return text;
}

std::string ms_text(std::int64_t ms) {
  if (ms < 0) return ms_text(-ms).insert(0, 1, '-');  // not "-" + …: g++ 12 -O3 warns falsely (-Wrestrict)
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms < 120000) return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
  if (ms < 7200000) return std::to_string(ms / 60000) + " min";
  return std::to_string(ms / 3600000) + " h";
}

}  // namespace streamq::cli
