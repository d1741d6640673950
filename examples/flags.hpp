// SPDX-License-Identifier: MIT
// The examples' tiny command-line parser: "--name value" pairs over a map of known flags.
#pragma once

#include <charconv>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

namespace example {

/// True for a lone --help or -h.
inline bool wants_help(int argc, char** argv) {
  return argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h");
}

/// Reads "--name value" pairs into `flags`, which holds every known flag with its default.
/// Throws std::invalid_argument for an unknown flag or a missing value.
inline void parse_flags(int argc, char** argv, std::map<std::string, std::string>& flags) {
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (!flags.contains(name)) throw std::invalid_argument("unknown flag " + name);
    if (i + 1 >= argc) throw std::invalid_argument(name + " needs a value");
    flags[name] = argv[i + 1];
  }
}

/// Parses an integer flag value >= min; throws std::invalid_argument naming the flag.
inline int to_int(const std::string& name, const std::string& text, int min) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min) {
    throw std::invalid_argument(name + " must be an integer >= " + std::to_string(min));
  }
  return value;
}

}  // namespace example
