// SPDX-License-Identifier: MIT
// The enqueue-path JSON scanner must agree with nlohmann::json (what the Consumer parses
// with) on every input, except that it refuses a leading byte-order mark.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wire/json_check.hpp"

namespace {

using streamq::detail::check_json;
using streamq::detail::JsonCheck;

bool nlohmann_accepts(const std::string& s) { return nlohmann::json::accept(s); }

/// Where the two may differ by design: nlohmann treats a NUL byte as the end of its input
/// and accepts "1\0junk"; the scanner refuses anything after the value.
bool agree(const std::string& s) {
  const bool ours = check_json(s, 64) == JsonCheck::ok;
  const bool theirs = nlohmann_accepts(s);
  if (ours == theirs) return true;
  return !ours && theirs && s.find('\0') != std::string::npos;
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> c = {
      "{}",
      "[]",
      "0",
      "-0",
      "1.5",
      "-1.5e10",
      "1E+2",
      "1e-2",
      "\"\"",
      "true",
      "false",
      "null",
      " \t\n\r{ \"a\" : [ 1 , 2 , { \"b\" : null } ] } \n",
      R"({"to":"user@example.com","template":"order_confirmation","order_id":12345})",
      R"("\u00e9\ud83d\ude00\n\t\"\\\/\b\f\r")",
      "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
      "",
      " ",
      "{",
      "}",
      "[",
      "]",
      "[1,]",
      "[,1]",
      "{\"a\"}",
      "{\"a\":}",
      "{\"a\":1,}",
      "{a:1}",
      "{\"a\":1 \"b\":2}",
      "[1 2]",
      "01",
      "1.",
      ".5",
      "-",
      "+1",
      "1e",
      "1e+",
      "0x10",
      "NaN",
      "Infinity",
      "tru",
      "nul",
      "falsey",
      "truefalse",
      "\"unterminated",
      "\"bad \\x escape\"",
      "\"\\u12\"",
      "\"\\uZZZZ\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"\\ud800\\u0041\"",
      "\"\\ud800x\"",
      std::string("\"a\0b\"", 5),
      "\"tab\there\"",
      "\"\x7f\"",
      "\"\xc0\xaf\"",
      "\"\xc1\xbf\"",
      "\"\xe0\x80\xaf\"",
      "\"\xed\xa0\x80\"",
      "\"\xf4\x90\x80\x80\"",
      "\"\xf5\x80\x80\x80\"",
      "\"\xff\"",
      "\"\x80\"",
      "\"\xc3\"",
      "\"\xe2\x82\"",
      "1 2",
      "{} {}",
      "1e400",
      "-1e400",
      "1e-400",
      "123456789012345678901234567890",
      "[1e5525]",
      "[1]]",
      "[[1]",
      "{\"a\":1}}",
      "// comment\n1",
      "/* c */ 1",
      "'single'",
      "[\"a\",\"b\",]",
      std::string("1\0", 2),
      std::string("1\0junk", 6),
      "\"\\/\"",
      "[-]",
      "[--1]",
      "[1e5.5]",
      "[1.5e]",
      "{\"\":\"\"}",
  };
  return c;
}

TEST(JsonCheck, AgreesWithNlohmannOnTheCorpus) {
  for (const std::string& s : corpus()) {
    EXPECT_TRUE(agree(s)) << '[' << s << ']';
  }
}

TEST(JsonCheck, AgreesWithNlohmannOnRandomMutations) {
  // Deterministic: the same 200,000 mutated inputs every run.
  std::mt19937 rng(20261129);
  const std::string alphabet = "{}[],:\"\\ 0123456789-+.eEtrufalsn\t\n/bu\xc3\xa9\xe2\x82\xac\xff\x80";
  int disagreements = 0;
  for (int n = 0; n < 200000; ++n) {
    std::string s = corpus()[rng() % corpus().size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: s.insert(s.begin() + static_cast<std::ptrdiff_t>(pos), c); break;
        case 1:
          if (pos < s.size()) s.erase(pos, 1);
          break;
        default:
          if (pos < s.size()) s[pos] = c;
          break;
      }
    }
    if (!agree(s) && ++disagreements <= 5) ADD_FAILURE() << "disagree on [" << s << ']';
  }
  EXPECT_EQ(disagreements, 0);
}

TEST(JsonCheck, DepthLimit) {
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_EQ(check_json(nested(64), 64), JsonCheck::ok);
  EXPECT_EQ(check_json(nested(65), 64), JsonCheck::too_deep);
  EXPECT_EQ(check_json("{\"a\":{\"b\":[1]}}", 3), JsonCheck::ok);
  EXPECT_EQ(check_json("{\"a\":{\"b\":[1]}}", 2), JsonCheck::too_deep);
  // 200,000 levels: refused at the limit, without recursion or a 200,000-entry stack.
  EXPECT_EQ(check_json(nested(200000), 64), JsonCheck::too_deep);
}

TEST(JsonCheck, DepthCountsContainersNotBracketsInStrings) {
  EXPECT_EQ(check_json(R"({"a":[1,{"b":[2]}],"c":{}})", 4), JsonCheck::ok);
  EXPECT_EQ(check_json(R"({"a":[1,{"b":[2]}],"c":{}})", 3), JsonCheck::too_deep);
  EXPECT_EQ(check_json(R"(["[[[[{{{{"])", 1), JsonCheck::ok);
  EXPECT_EQ(check_json(R"({"k]]}}":"[[["})", 1), JsonCheck::ok);
  EXPECT_EQ(check_json(R"(["\"[[[[\"[["])", 1), JsonCheck::ok);       // escaped quotes stay inside
  EXPECT_EQ(check_json(R"(["\\", [[1]]])", 2), JsonCheck::too_deep);  // an escaped backslash does not
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  EXPECT_EQ(check_json(objects, 10), JsonCheck::too_deep);  // refused at level 11, unparsed
}

TEST(JsonCheck, RefusesByteOrderMarkAndBytesAfterTheValue) {
  EXPECT_EQ(check_json("\xef\xbb\xbf{}", 64), JsonCheck::invalid);
  EXPECT_EQ(check_json(std::string("{}\0junk", 7), 64), JsonCheck::invalid);
  EXPECT_EQ(check_json("1e400", 64), JsonCheck::invalid);
  EXPECT_EQ(check_json("1e-400", 64), JsonCheck::ok);  // underflows to 0, as nlohmann reads it
}

}  // namespace
