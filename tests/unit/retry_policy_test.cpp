// SPDX-License-Identifier: MIT
// The retry policy (what becomes of an attempt) and the entries it writes; no server.
#include <gtest/gtest.h>

#include <string>

#include "consumer/retry_policy.hpp"

namespace {

using namespace streamq::detail;
using streamq::Fields;

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

}  // namespace
