// SPDX-License-Identifier: MIT
#include "json_check.hpp"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace streamq::detail {
namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  void whitespace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return s_[i_]; }
  bool take(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  bool number() {
    const std::size_t start = i_;
    take('-');
    if (take('0')) {
      // a leading zero stands alone
    } else if (!digits()) {
      return false;
    }
    bool real = false;
    if (take('.')) {
      if (!digits()) return false;
      real = true;
    }
    if (take('e') || take('E')) {
      if (!take('+')) take('-');
      if (!digits()) return false;
      real = true;
    }
    // Like nlohmann (what the Consumer parses with), refuse numbers a double cannot hold;
    // integers longer than any 64-bit one are read as doubles too.
    if (real || i_ - start > 19) {
      const std::string token(s_.substr(start, i_ - start));
      return std::isfinite(std::strtod(token.c_str(), nullptr));
    }
    return true;
  }

  bool string() {
    if (!take('"')) return false;
    while (i_ < s_.size()) {
      const auto b = static_cast<unsigned char>(s_[i_]);
      if (b == '"') {
        ++i_;
        return true;
      }
      if (b == '\\') {
        if (!escape()) return false;
      } else if (b < 0x20) {  // NOLINT(bugprone-branch-clone): a different reason to refuse
        return false;         // control characters must be escaped
      } else if (b < 0x80) {
        ++i_;
      } else if (!utf8()) {
        return false;
      }
    }
    return false;  // unterminated
  }

 private:
  bool digits() {
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }

  int hex4() {
    if (i_ + 4 > s_.size()) return -1;
    int v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        return -1;
    }
    return v;
  }

  bool escape() {
    ++i_;  // the backslash
    if (i_ >= s_.size()) return false;
    const char c = s_[i_++];
    switch (c) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't': return true;
      case 'u': {
        const int unit = hex4();
        if (unit < 0) return false;
        if (unit >= 0xDC00 && unit <= 0xDFFF) return false;  // a low surrogate alone
        if (unit >= 0xD800 && unit <= 0xDBFF) {              // needs its low surrogate
          if (!take('\\') || !take('u')) return false;
          const int low = hex4();
          return low >= 0xDC00 && low <= 0xDFFF;
        }
        return true;
      }
      default: return false;
    }
  }

  bool continuation(unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    if (i_ >= s_.size()) return false;
    const auto b = static_cast<unsigned char>(s_[i_]);
    if (b < lo || b > hi) return false;
    ++i_;
    return true;
  }

  // Well-formed UTF-8 as in RFC 3629 / Unicode table 3-7.
  bool utf8() {
    const auto b = static_cast<unsigned char>(s_[i_++]);
    if (b >= 0xC2 && b <= 0xDF) return continuation();
    if (b == 0xE0) return continuation(0xA0, 0xBF) && continuation();
    if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return continuation() && continuation();
    if (b == 0xED) return continuation(0x80, 0x9F) && continuation();
    if (b == 0xF0) return continuation(0x90, 0xBF) && continuation() && continuation();
    if (b >= 0xF1 && b <= 0xF3) return continuation() && continuation() && continuation();
    if (b == 0xF4) return continuation(0x80, 0x8F) && continuation() && continuation();
    return false;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

JsonCheck check_json(std::string_view text, int max_depth) {
  Scanner in(text);
  std::vector<char> open;  // '{' or '[' per nesting level
  for (;;) {
    // A value is expected here.
    in.whitespace();
    if (in.at_end()) return JsonCheck::invalid;
    const char c = in.peek();
    if (c == '{' || c == '[') {
      if (static_cast<int>(open.size()) >= max_depth) return JsonCheck::too_deep;
      in.take(c);
      in.whitespace();
      if (!in.take(c == '{' ? '}' : ']')) {  // an empty container is a complete value
        open.push_back(c);
        if (c == '{') {
          if (!in.string()) return JsonCheck::invalid;
          in.whitespace();
          if (!in.take(':')) return JsonCheck::invalid;
        }
        continue;  // the first element
      }
    } else if (c == '"') {
      if (!in.string()) return JsonCheck::invalid;
    } else if (c == 't') {
      if (!in.literal("true")) return JsonCheck::invalid;
    } else if (c == 'f') {
      if (!in.literal("false")) return JsonCheck::invalid;
    } else if (c == 'n') {
      if (!in.literal("null")) return JsonCheck::invalid;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (!in.number()) return JsonCheck::invalid;
    } else {
      return JsonCheck::invalid;
    }
    // After a value: close containers, or go on to the next element.
    for (;;) {
      in.whitespace();
      if (open.empty()) return in.at_end() ? JsonCheck::ok : JsonCheck::invalid;
      if (in.at_end()) return JsonCheck::invalid;
      const char top = open.back();
      if (in.take(',')) {
        if (top == '{') {
          in.whitespace();
          if (!in.string()) return JsonCheck::invalid;
          in.whitespace();
          if (!in.take(':')) return JsonCheck::invalid;
        }
        break;  // the next element's value
      }
      if (!in.take(top == '{' ? '}' : ']')) return JsonCheck::invalid;
      open.pop_back();
    }
  }
}

}  // namespace streamq::detail
