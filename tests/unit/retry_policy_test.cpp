// SPDX-License-Identifier: MIT
// The retry policy (what becomes of an attempt) and the entries it writes; no server.
#include <gtest/gtest.h>

#include <string>

#include "consumer/retry_policy.hpp"

namespace {

using namespace streamq::detail;
using streamq::Fields;
using streamq::RetryBackoff;

std::string get(const Fields& f, const std::string& name) {
  for (const auto& [k, v] : f) {
    if (k == name) return v;
  }
  return "<missing>";
}

TEST(RetryPolicy, SuccessIsAcked) {
  EXPECT_EQ(decide({AttemptResult::succeeded, 0, 3}), (Decision{Verdict::ack, {}}));
  EXPECT_EQ(decide({AttemptResult::succeeded, 3, 3}), (Decision{Verdict::ack, {}}));
}

TEST(RetryPolicy, FailureIsRetriedWhileRetriesRemain) {
  EXPECT_EQ(decide({AttemptResult::failed, 0, 3}).verdict, Verdict::retry);
  EXPECT_EQ(decide({AttemptResult::failed, 2, 3}).verdict, Verdict::retry);
  EXPECT_EQ(decide({AttemptResult::failed, 3, 3}),
            (Decision{Verdict::dead_letter, reason::retries_exhausted}));
  EXPECT_EQ(decide({AttemptResult::failed, 7, 3}),
            (Decision{Verdict::dead_letter, reason::retries_exhausted}));
  // max_retries 0: the first failure is final.
  EXPECT_EQ(decide({AttemptResult::failed, 0, 0}),
            (Decision{Verdict::dead_letter, reason::retries_exhausted}));
}

TEST(RetryPolicy, EverythingElseIsDeadLetteredAtOnceWithItsReason) {
  EXPECT_EQ(decide({AttemptResult::permanent, 0, 3}), (Decision{Verdict::dead_letter, reason::permanent}));
  EXPECT_EQ(decide({AttemptResult::malformed, 0, 3}), (Decision{Verdict::dead_letter, reason::malformed}));
  EXPECT_EQ(decide({AttemptResult::no_handler, 0, 3}), (Decision{Verdict::dead_letter, reason::no_handler}));
  EXPECT_EQ(decide({AttemptResult::body_lost, 0, 3}), (Decision{Verdict::dead_letter, reason::body_lost}));
  // A payload that does not convert: retrying cannot fix it, even with retries left.
  EXPECT_EQ(decide({AttemptResult::bad_payload, 0, 3}),
            (Decision{Verdict::dead_letter, reason::bad_payload}));
}

TEST(RetryCopy, RaisesTheCountSetsTheErrorAndKeepsEverythingElse) {
  const Fields original = {{"task_id", "t1"},        {"task_type", "send"}, {"payload", "{}"},
                           {"created_at", "2026"},   {"max_retries", "3"},  {"retry_count", "1"},
                           {"last_error", "before"}, {"priority", "high"}};
  const Fields copy = retry_copy(original, 1, "smtp down");
  ASSERT_EQ(copy.size(), original.size());
  EXPECT_EQ(get(copy, "retry_count"), "2");
  EXPECT_EQ(get(copy, "last_error"), "smtp down");
  EXPECT_EQ(get(copy, "priority"), "high");
  EXPECT_EQ(get(copy, "task_id"), "t1");
  EXPECT_EQ(copy[0].first, "task_id");  // order kept
}

TEST(RetryCopy, AddsMissingCounters) {
  const Fields seed_style = {
      {"task_id", "t1"}, {"task_type", "send"}, {"payload", "{}"}, {"created_at", "2026"}};
  const Fields copy = retry_copy(seed_style, 0, "boom");
  EXPECT_EQ(get(copy, "retry_count"), "1");
  EXPECT_EQ(get(copy, "last_error"), "boom");
  EXPECT_EQ(copy.size(), seed_style.size() + 2);
}

using std::chrono::milliseconds;

TEST(RetryDelay, FollowsTheCurveWithoutJitter) {
  const RetryBackoff b{
      .base = milliseconds(1000), .cap = milliseconds(60000), .factor = 2.0, .jitter = false};
  EXPECT_EQ(retry_delay(b, 0, 0.5), milliseconds(1000));
  EXPECT_EQ(retry_delay(b, 1, 0.5), milliseconds(2000));
  EXPECT_EQ(retry_delay(b, 4, 0.5), milliseconds(16000));
  EXPECT_EQ(retry_delay(b, 6, 0.5), milliseconds(60000));     // capped (64 s)
  EXPECT_EQ(retry_delay(b, 5000, 0.5), milliseconds(60000));  // factor^n is inf: still the cap
  const RetryBackoff flat{
      .base = milliseconds(300), .cap = milliseconds(300), .factor = 1.0, .jitter = false};
  EXPECT_EQ(retry_delay(flat, 9, 0.5), milliseconds(300));
}

TEST(RetryDelay, FullJitterScalesTheCurveByTheRandomDraw) {
  const RetryBackoff b{.base = milliseconds(1000), .cap = milliseconds(10000), .factor = 3.0, .jitter = true};
  EXPECT_EQ(retry_delay(b, 2, 0.0), milliseconds(0));
  EXPECT_EQ(retry_delay(b, 2, 0.5), milliseconds(4500));    // half of 9 s
  EXPECT_EQ(retry_delay(b, 3, 0.999), milliseconds(9990));  // the cap (27 s) scaled
  EXPECT_EQ(retry_delay(b, 3, 1.0), milliseconds(10000));   // never above the cap
  // Draws from unit_random() stay in [0, 1), so the delays stay in [0, bound).
  for (int i = 0; i < 1000; ++i) {
    const double u = unit_random();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const milliseconds d = retry_delay(b, 1, u);
    ASSERT_GE(d, milliseconds(0));
    ASSERT_LT(d, milliseconds(3000));
  }
}

TEST(RetryDelay, AZeroBaseRetriesAtOnce) {
  const RetryBackoff b{.base = milliseconds(0), .cap = milliseconds(0), .factor = 2.0, .jitter = true};
  EXPECT_EQ(retry_delay(b, 0, 0.7), milliseconds(0));
  EXPECT_EQ(retry_delay(b, 5000, 0.7), milliseconds(0));  // 0 * inf is not NaN here
}

}  // namespace
