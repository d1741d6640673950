// SPDX-License-Identifier: MIT
// The wire format (no server): task ids, payload guards, counts, the entries written for a new
// task and the entry decoder. Timestamps: timestamp_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "known_instant.hpp"
#include "redis/connection.hpp"
#include "wire/codec.hpp"

namespace {

using namespace std::chrono;
using streamq::Fields;
using streamq::Task;
using streamq::detail::Argv;
using streamq::detail::DecodeLimits;
using streamq::detail::TimePoint;
using streamq::test::from_micros;
using streamq::test::kKnownMicros;
using streamq::test::kKnownSeconds;
namespace d = streamq::detail;

std::vector<std::string> strings(const Argv& argv) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < argv.size(); ++i) out.emplace_back(argv.data()[i], argv.lengths()[i]);
  return out;
}

// ---------------------------------------------------------------- task ids

TEST(Uuid, Version4TextForm) {
  const std::regex shape("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = d::new_uuid_v4();
    ASSERT_EQ(id.size(), 36u) << id;
    ASSERT_TRUE(std::regex_match(id, shape)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

// ---------------------------------------------------------------- payload guards

TEST(PayloadProblem, AcceptsAnyJsonValue) {
  for (const char* ok :
       {"{}", "[1,2]", "\"s\"", "3", "null", "true", "-1.5e3",
        R"({"to":"user@example.com","n":[1,{"x":null}]})", " {} ", "\"caf\xc3\xa9 \xe2\x82\xac\""}) {
    EXPECT_FALSE(d::payload_problem(ok, 1 << 20, 64).has_value()) << ok;
  }
}

TEST(PayloadProblem, TooLargeMentionsTheCap) {
  const std::string payload = "\"" + std::string(99, 'x') + "\"";  // 101 bytes
  const auto problem = d::payload_problem(payload, 100, 64);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("100"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("101"), std::string::npos) << *problem;
  EXPECT_FALSE(d::payload_problem(payload, 101, 64).has_value());
}

TEST(PayloadProblem, TooDeep) {
  EXPECT_FALSE(d::payload_problem("[[1]]", 1 << 20, 2).has_value());
  const auto problem = d::payload_problem("[[[1]]]", 1 << 20, 2);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("deep"), std::string::npos) << *problem;
  EXPECT_NE(problem->find('2'), std::string::npos) << *problem;
}

TEST(PayloadProblem, HugeNestingIsRefusedAsTooDeepWithoutParsing) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const auto problem = d::payload_problem(deep, 1 << 20, 64);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("deep"), std::string::npos) << *problem;
}

TEST(PayloadProblem, InvalidJson) {
  for (const char* bad : {"", "{", "{'a':1}", "[1,]", "nan", "{} {}", "hello", "\"unterminated"}) {
    const auto problem = d::payload_problem(bad, 1 << 20, 64);
    ASSERT_TRUE(problem.has_value()) << bad;
    EXPECT_NE(problem->find("JSON"), std::string::npos) << *problem;
  }
}

TEST(PayloadProblem, InvalidUtf8InsideAString) {
  for (const char* bad :
       {"\"\xff\"", "\"a\xc3\x28\"", "\"\xc0\xaf\"", "{\"k\":\"\xed\xa0\x80\"}", "[\"\xe2\x82\"]"}) {
    EXPECT_TRUE(d::payload_problem(bad, 1 << 20, 64).has_value()) << bad;
  }
}

// ---------------------------------------------------------------- counts

TEST(ParseCount, NonNegativeDecimals) {
  EXPECT_EQ(d::parse_count("0"), 0);
  EXPECT_EQ(d::parse_count("3"), 3);
  EXPECT_EQ(d::parse_count("42"), 42);
  EXPECT_EQ(d::parse_count("2147483647"), 2147483647);
}

TEST(ParseCount, RejectsEverythingElse) {
  for (const char* bad :
       {"-1", "", "3x", " 3", "3 ", "+3", "99999999999", "2147483648", "0x10", "1.5", "abc"}) {
    EXPECT_FALSE(d::parse_count(bad).has_value()) << '"' << bad << '"';
  }
}

// ---------------------------------------------------------------- writing entries

TEST(AppendNewTask, WritesTheSeedFieldsInOrder) {
  const std::string created = d::format_timestamp(from_micros(kKnownMicros));
  const d::NewTask task{"id-1", "send_email", R"({"to":"a@b"})", created, 7, nullptr};
  Argv argv{"XADD", "q", "*"};
  const std::size_t added = d::append_new_task(argv, task);
  EXPECT_EQ(added, 12u);
  EXPECT_EQ(d::new_task_string_count(task), 12u);
  const std::vector<std::string> expected = {"XADD",
                                             "q",
                                             "*",
                                             "task_id",
                                             "id-1",
                                             "task_type",
                                             "send_email",
                                             "payload",
                                             R"({"to":"a@b"})",
                                             "created_at",
                                             "2026-11-29T18:00:00.123456",
                                             "max_retries",
                                             "7",
                                             "retry_count",
                                             "0"};
  EXPECT_EQ(strings(argv), expected);
}

TEST(AppendNewTask, ExtrasFollowTheStandardFields) {
  const std::vector<std::pair<std::string, std::string>> extras = {{"priority", "high"}, {"tenant", "acme"}};
  const std::string created = d::format_timestamp(from_micros(kKnownMicros));
  const d::NewTask task{"id-2", "resize", "[1,2]", created, 0, &extras};
  Argv argv;
  const std::size_t added = d::append_new_task(argv, task);
  EXPECT_EQ(added, 16u);
  EXPECT_EQ(d::new_task_string_count(task), 16u);
  ASSERT_EQ(argv.size(), 16u);
  const auto s = strings(argv);
  EXPECT_EQ(s[8], "max_retries");
  EXPECT_EQ(s[9], "0");
  EXPECT_EQ(s[10], "retry_count");
  EXPECT_EQ(s[11], "0");
  EXPECT_EQ(std::vector<std::string>(s.begin() + 12, s.end()),
            (std::vector<std::string>{"priority", "high", "tenant", "acme"}));
}

TEST(AppendNewTask, CountMatchesWithEmptyExtras) {
  const std::vector<std::pair<std::string, std::string>> none;
  const d::NewTask task{"id", "t", "{}", "2026-11-29T18:00:00.000000", 3, &none};
  Argv argv;
  EXPECT_EQ(d::append_new_task(argv, task), 12u);
  EXPECT_EQ(argv.size(), d::new_task_string_count(task));
}

TEST(ReservedFields, WireAndDeadLetterNames) {
  for (const char* name : {"task_id", "task_type", "payload", "created_at", "max_retries", "retry_count",
                           "last_error", "error", "failed_at", "original_id", "consumer", "reason"}) {
    EXPECT_TRUE(d::is_reserved_field(name)) << name;
  }
  for (const char* name : {"priority", "", "Task_id", "task_id ", "payloads", "tenant"}) {
    EXPECT_FALSE(d::is_reserved_field(name)) << '"' << name << '"';
  }
}

// ---------------------------------------------------------------- decoding entries

Fields good_fields() {
  return {{"task_id", "0b9f4d2e-7c1a-4e8b-9f00-123456789abc"},
          {"task_type", "send_email"},
          {"payload", R"({"to":"user@example.com","n":2})"},
          {"created_at", "2026-11-29T18:00:00.123456"},
          {"max_retries", "5"},
          {"retry_count", "2"},
          {"priority", "high"}};
}

TEST(DecodeTask, GoodEntry) {
  const Fields original = good_fields();
  const auto shared = std::make_shared<const Fields>(original);
  std::stop_source stop;
  d::Decoded decoded = d::decode_task("1795975200123-0", shared, 3, DecodeLimits{}, stop.get_token());
  ASSERT_TRUE(std::holds_alternative<Task>(decoded)) << std::get<std::string>(decoded);
  const Task& task = std::get<Task>(decoded);
  EXPECT_EQ(task.id(), "0b9f4d2e-7c1a-4e8b-9f00-123456789abc");
  EXPECT_EQ(task.type(), "send_email");
  EXPECT_EQ(task.payload(), R"({"to":"user@example.com","n":2})");
  EXPECT_EQ(task.json().at("to"), "user@example.com");
  EXPECT_EQ(task.json().at("n"), 2);
  EXPECT_EQ(task.retry_count(), 2);
  EXPECT_EQ(task.max_retries(), 5);
  EXPECT_EQ(task.created_at(), from_micros(kKnownMicros));
  EXPECT_EQ(task.entry_id(), "1795975200123-0");
  EXPECT_EQ(task.deliveries(), 3);
  EXPECT_EQ(task.fields(), original);
  EXPECT_EQ(&task.fields(), shared.get());  // shared, not copied: the consumer keeps them too
  EXPECT_EQ(task.field("priority"), std::optional<std::string_view>("high"));
  EXPECT_EQ(task.field("task_type"), std::optional<std::string_view>("send_email"));
  EXPECT_FALSE(task.field("missing").has_value());
  EXPECT_FALSE(task.stop_requested());
  stop.request_stop();
  EXPECT_TRUE(task.stop_requested());
  EXPECT_TRUE(task.stop_token().stop_requested());
}

TEST(DecodeTask, DefaultTaskHasNoFieldsAndNeverStops) {
  const Task task;
  EXPECT_TRUE(task.fields().empty());
  EXPECT_EQ(task.id(), "");
  EXPECT_FALSE(task.field("task_id").has_value());
  EXPECT_FALSE(task.stop_token().stop_possible());
}

TEST(DecodeTask, FieldOrderDoesNotMatter) {
  Fields fields = good_fields();
  std::swap(fields[0], fields[6]);
  std::swap(fields[1], fields[3]);
  d::Decoded decoded = d::decode_task("1-0", std::make_shared<const Fields>(fields), 1, DecodeLimits{});
  ASSERT_TRUE(std::holds_alternative<Task>(decoded)) << std::get<std::string>(decoded);
  const Task& task = std::get<Task>(decoded);
  EXPECT_EQ(task.id(), "0b9f4d2e-7c1a-4e8b-9f00-123456789abc");
  EXPECT_EQ(task.type(), "send_email");
  EXPECT_EQ(task.payload(), R"({"to":"user@example.com","n":2})");
  EXPECT_EQ(task.field("priority"), std::optional<std::string_view>("high"));
}

TEST(DecodeTask, MissingCountersFallBackToDefaults) {
  Fields fields = {{"task_id", "t1"},
                   {"task_type", "resize"},
                   {"payload", "[1,2,3]"},
                   {"created_at", "2026-11-29T18:00:00"}};
  DecodeLimits limits;
  limits.default_max_retries = 7;
  d::Decoded decoded = d::decode_task("5-1", std::make_shared<const Fields>(fields), 1, limits);
  ASSERT_TRUE(std::holds_alternative<Task>(decoded)) << std::get<std::string>(decoded);
  const Task& task = std::get<Task>(decoded);
  EXPECT_EQ(task.max_retries(), 7);
  EXPECT_EQ(task.retry_count(), 0);
  EXPECT_EQ(task.json(), nlohmann::json({1, 2, 3}));
  EXPECT_EQ(task.created_at(), TimePoint(seconds(kKnownSeconds)));
}

TEST(DecodeTask, AnyJsonValueIsAPayload) {
  for (const char* payload : {"3", "null", "\"s\"", "[]", "true"}) {
    Fields fields = good_fields();
    fields[2].second = payload;
    d::Decoded decoded = d::decode_task("1-0", std::make_shared<const Fields>(fields), 1, DecodeLimits{});
    ASSERT_TRUE(std::holds_alternative<Task>(decoded)) << payload;
    EXPECT_EQ(std::get<Task>(decoded).json(), nlohmann::json::parse(payload));
  }
}

Fields without(Fields f, std::string_view name) {
  std::erase_if(f, [&](const auto& kv) { return kv.first == name; });
  return f;
}

Fields with(Fields f, std::string_view name, std::string value) {
  for (auto& [k, v] : f) {
    if (k == name) v = std::move(value);
  }
  return f;
}

struct BadEntry {
  const char* label;
  Fields fields;
  const char* reason_contains;
};

std::vector<BadEntry> bad_entries() {
  const Fields g = good_fields();
  Fields duplicate = g;
  duplicate.emplace_back("payload", "{}");
  Fields duplicate_counter = g;
  duplicate_counter.emplace_back("retry_count", "2");
  return {
      {"missing task_id", without(g, "task_id"), "task_id"},
      {"missing task_type", without(g, "task_type"), "task_type"},
      {"missing payload", without(g, "payload"), "payload"},
      {"missing created_at", without(g, "created_at"), "created_at"},
      {"empty task_id", with(g, "task_id", ""), "task_id"},
      {"empty task_type", with(g, "task_type", ""), "task_type"},
      {"duplicate payload", duplicate, "duplicate"},
      {"duplicate retry_count", duplicate_counter, "duplicate"},
      {"malformed created_at", with(g, "created_at", "yesterday"), "created_at"},
      {"created_at month 13", with(g, "created_at", "2026-13-29T18:00:00"), "created_at"},
      {"malformed max_retries", with(g, "max_retries", "three"), "max_retries"},
      {"negative max_retries", with(g, "max_retries", "-1"), "max_retries"},
      {"malformed retry_count", with(g, "retry_count", "1.5"), "retry_count"},
      {"payload too large", with(g, "payload", "\"" + std::string(200, 'x') + "\""), "bytes"},
      {"payload too deep", with(g, "payload", "[[[[[1]]]]]"), "deep"},
      {"payload not JSON", with(g, "payload", "{not json"), "JSON"},
      {"payload invalid UTF-8", with(g, "payload", "{\"to\":\"\xff\xfe\"}"), "JSON"},
  };
}

TEST(DecodeTask, EveryProblemBecomesAReasonAndKeepsTheFields) {
  DecodeLimits limits;
  limits.max_payload_bytes = 100;
  limits.max_payload_depth = 4;
  for (const BadEntry& bad : bad_entries()) {
    SCOPED_TRACE(bad.label);
    d::Decoded decoded;
    ASSERT_NO_THROW(decoded = d::decode_task("9-0", std::make_shared<const Fields>(bad.fields), 1, limits));
    ASSERT_TRUE(std::holds_alternative<std::string>(decoded));
    const std::string& reason = std::get<std::string>(decoded);
    EXPECT_FALSE(reason.empty());
    EXPECT_NE(reason.find(bad.reason_contains), std::string::npos) << reason;
  }
}

TEST(DecodeTask, HugeNestingIsReasonedAboutNotParsed) {
  // 200,000 levels would exhaust a recursive parser's stack; the depth guard answers first.
  const Fields bad = with(good_fields(), "payload", std::string(200000, '[') + std::string(200000, ']'));
  d::Decoded decoded = d::decode_task("9-0", std::make_shared<const Fields>(bad), 1, DecodeLimits{});
  ASSERT_TRUE(std::holds_alternative<std::string>(decoded));
  EXPECT_NE(std::get<std::string>(decoded).find("deep"), std::string::npos) << std::get<std::string>(decoded);
}

TEST(DecodeTask, PayloadAtTheCapsIsAccepted) {
  DecodeLimits limits;
  limits.max_payload_depth = 4;
  const std::string payload = "[[[[1]]]]";
  limits.max_payload_bytes = payload.size();
  Fields fields = with(good_fields(), "payload", payload);
  d::Decoded decoded = d::decode_task("9-0", std::make_shared<const Fields>(fields), 1, limits);
  ASSERT_TRUE(std::holds_alternative<Task>(decoded)) << std::get<std::string>(decoded);
  EXPECT_EQ(std::get<Task>(decoded).payload(), payload);
}

}  // namespace
