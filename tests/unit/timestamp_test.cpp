// SPDX-License-Identifier: MIT
// Timestamps of the wire format (no server): created_at and failed_at as Python's isoformat()
// writes them, with microseconds, and the forms the decoder accepts (offsets, a Z suffix, a space
// separator, three to nine fractional digits) or refuses.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <regex>
#include <string>

#include "known_instant.hpp"
#include "wire/codec.hpp"

namespace {

using namespace std::chrono;
using streamq::detail::TimePoint;
using streamq::test::from_micros;
using streamq::test::kKnownMicros;
using streamq::test::kKnownSeconds;
namespace d = streamq::detail;

TimePoint from_nanos(std::int64_t ns) {
  return TimePoint(duration_cast<system_clock::duration>(nanoseconds(ns)));
}

TEST(Timestamp, FormatsPythonIsoformatWithMicroseconds) {
  const std::string text = d::format_timestamp(from_micros(kKnownMicros));
  EXPECT_EQ(text, "2026-11-29T18:00:00.123456");
  EXPECT_EQ(text.size(), 26u);
  EXPECT_TRUE(std::regex_match(text, std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6})"))) << text;
}

TEST(Timestamp, FormatKeepsSixDigitsForWholeSeconds) {
  EXPECT_EQ(d::format_timestamp(TimePoint{}), "1970-01-01T00:00:00.000000");
  EXPECT_EQ(d::format_timestamp(from_micros(kKnownSeconds * 1000000 + 7)), "2026-11-29T18:00:00.000007");
}

TEST(Timestamp, FormatBeforeEpochBorrowsASecond) {
  EXPECT_EQ(d::format_timestamp(from_micros(-1)), "1969-12-31T23:59:59.999999");
}

TEST(Timestamp, FormatTruncatesSubMicrosecond) {
  EXPECT_EQ(d::format_timestamp(from_nanos(kKnownMicros * 1000 + 999)), "2026-11-29T18:00:00.123456");
}

TEST(Timestamp, ParseRoundTripsFormat) {
  for (std::int64_t us :
       {kKnownMicros, std::int64_t{0}, std::int64_t{-1}, std::int64_t{951782400000000} /* 2000-02-29 */,
        std::int64_t{1709164799999999} /* 2024-02-28T23:59:59.999999 */}) {
    const TimePoint t = from_micros(us);
    const auto parsed = d::parse_timestamp(d::format_timestamp(t));
    ASSERT_TRUE(parsed.has_value()) << d::format_timestamp(t);
    EXPECT_EQ(*parsed, t) << d::format_timestamp(t);
  }
}

TEST(Timestamp, ParsesPythonIsoformatWithoutFraction) {
  const auto t = d::parse_timestamp("2026-11-29T18:00:00");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, TimePoint(seconds(kKnownSeconds)));
}

TEST(Timestamp, ParsesZuluSuffix) {
  const auto t = d::parse_timestamp("2026-11-29T18:00:00.123456Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, from_micros(kKnownMicros));
  EXPECT_EQ(d::parse_timestamp("2026-11-29T18:00:00Z"), TimePoint(seconds(kKnownSeconds)));
}

TEST(Timestamp, OffsetsAreConvertedToUtc) {
  const TimePoint utc18 = TimePoint(seconds(kKnownSeconds));
  EXPECT_EQ(d::parse_timestamp("2026-11-29T21:00:00+03:00"), utc18);
  EXPECT_EQ(d::parse_timestamp("2026-11-29T21:00:00+0300"), utc18);
  EXPECT_EQ(d::parse_timestamp("2026-11-29T15:30:00-02:30"), utc18);
  EXPECT_EQ(d::parse_timestamp("2026-11-29T18:00:00+00:00"), utc18);
  EXPECT_EQ(d::parse_timestamp("2026-11-29T21:00:00.123456+03:00"), from_micros(kKnownMicros));
  // Across midnight: 01:00 at +03:00 is 22:00 the day before.
  const auto t = d::parse_timestamp("2026-11-30T01:00:00+03:00");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(d::format_timestamp(*t), "2026-11-29T22:00:00.000000");
}

// Found by tests/fuzz/fuzz_task: year 1013 overflowed the nanosecond clock (undefined behaviour).
TEST(Timestamp, RejectsTimesTheClockCannotHold) {
  EXPECT_FALSE(d::parse_timestamp("1013-12-01T00:00:00.000000").has_value());
  EXPECT_FALSE(d::parse_timestamp("9999-12-31T23:59:59").has_value());
  EXPECT_FALSE(d::parse_timestamp("1677-01-01T00:00:00").has_value());
  ASSERT_TRUE(d::parse_timestamp("1700-01-01T00:00:00").has_value());
  EXPECT_EQ(d::format_timestamp(*d::parse_timestamp("2200-01-01T00:00:00")), "2200-01-01T00:00:00.000000");
  EXPECT_EQ(d::parse_timestamp("1970-01-01T00:00:00Z"), TimePoint{});
}

TEST(Timestamp, AcceptsSpaceSeparator) {
  EXPECT_EQ(d::parse_timestamp("2026-11-29 18:00:00.123456"), from_micros(kKnownMicros));
}

TEST(Timestamp, AcceptsThreeOrNineFractionalDigits) {
  EXPECT_EQ(d::parse_timestamp("2026-11-29T18:00:00.123"), from_micros(kKnownSeconds * 1000000 + 123000));
  EXPECT_EQ(d::parse_timestamp("2026-11-29T18:00:00.5"), from_micros(kKnownSeconds * 1000000 + 500000));
  EXPECT_EQ(d::parse_timestamp("2026-11-29T18:00:00.123456789"),
            from_nanos(kKnownSeconds * 1000000000 + 123456789));
}

TEST(Timestamp, RejectsMalformedText) {
  for (const char* bad : {"",
                          "garbage",
                          "2026-11-29",
                          "2026-11-29T18:00",
                          "2026-11-29T18:00:0",
                          "2026-13-01T00:00:00",
                          "2026-00-10T00:00:00",
                          "2026-11-32T00:00:00",
                          "2026-11-29T24:00:00",
                          "2026-11-29T18:60:00",
                          "2026/11/29T18:00:00",
                          "2026-11-29X18:00:00",
                          "2026-11-29T18:00:00.",
                          "2026-11-29T18:00:00.12x",
                          "2026-11-29T18:00:00.123456abc",
                          "2026-11-29T18:00:00 ",
                          "2026-11-29T18:00:00Zjunk",
                          "2026-11-29T18:00:00+3:00",
                          "2026-11-29T18:00:00+03",
                          "2026-11-29T18:00:00+03:00junk",
                          "2026-11-29T18:00:00+24:00",
                          "20x6-11-29T18:00:00",
                          " 2026-11-29T18:00:00"}) {
    EXPECT_FALSE(d::parse_timestamp(bad).has_value()) << '"' << bad << '"';
  }
}

}  // namespace
