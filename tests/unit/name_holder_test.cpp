// SPDX-License-Identifier: MIT
// A consumer name's liveness key, "<client id> <token> <ms written>" (no server): what
// parse_name_holder takes, and what it refuses because streamq did not write it. A refused value
// is one holder the check cannot look at; a taken one goes into the CLIENT LIST that looks at
// every holder at once, so an id Redis refuses there would fail the look for all of them.
#include <gtest/gtest.h>

#include <optional>

#include "wire/name_holder.hpp"

namespace {

using streamq::detail::parse_name_holder;

TEST(NameHolder, ParsesTheValueNameLuaWrites) {
  const auto h = parse_name_holder("7 3f2a9c 1765100000123");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->client_id, "7");
  EXPECT_EQ(h->token, "3f2a9c");
  EXPECT_EQ(h->written_ms, 1765100000123);
  const auto largest = parse_name_holder("9223372036854775807 t 1");
  ASSERT_TRUE(largest.has_value());
  EXPECT_EQ(largest->client_id, "9223372036854775807");
}

TEST(NameHolder, RefusesAClientIdThatClientListWouldRefuse) {
  for (const char* value : {"92233720368547758070 t 1",  // beyond 2^63 - 1: "Invalid client ID"
                            "9223372036854775808 t 1", "0 t 1", "-3 t 1", "+3 t 1", "7x t 1", "x t 1"}) {
    EXPECT_EQ(parse_name_holder(value), std::nullopt) << value;
  }
}

TEST(NameHolder, RefusesAValueOfAnotherShape) {
  for (const char* value : {"", "7", "7 t", " 7 t 1", "7 t 1x"}) {
    EXPECT_EQ(parse_name_holder(value), std::nullopt) << value;
  }
}

}  // namespace
