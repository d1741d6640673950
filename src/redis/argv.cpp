// SPDX-License-Identifier: MIT
#include "argv.hpp"

#include <charconv>

namespace streamq::detail {

void format_command(const Argv& argv, std::string& out) {
  // RESP: *<argc>\r\n then $<len>\r\n<bytes>\r\n per argument. hiredis' own formatter runs a
  // format-string parser for every argument; this is the same bytes without it.
  out.clear();
  char num[24];
  auto put_count = [&](char prefix, std::size_t n) {
    out.push_back(prefix);
    const auto [end, ec] = std::to_chars(num, num + sizeof num, n);
    out.append(num, end);
    out.append("\r\n", 2);
  };
  put_count('*', argv.size());
  for (std::size_t i = 0; i < argv.size(); ++i) {
    put_count('$', argv.lengths()[i]);
    out.append(argv.data()[i], argv.lengths()[i]);
    out.append("\r\n", 2);
  }
}

}  // namespace streamq::detail
