// SPDX-License-Identifier: MIT
// What each kind of payload becomes (JSON text, JSON values, braced lists, typed values), and
// the errors a bad one gives, on the producer side (Payload) and the consumer side (payload_as).
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "typed_payload.hpp"
#include "wire/task_factory.hpp"

namespace {

using streamq::Payload;
using streamq::TaskSpec;

using streamq::test::Resize;

struct Unconvertible {};
void to_json(nlohmann::json&, const Unconvertible&) { throw std::runtime_error("no JSON for this"); }

struct ThrowsNonStd {};
void to_json(nlohmann::json&, const ThrowsNonStd&) { throw 42; }

// Text stays text: a string literal, std::string or string_view is never re-serialised as a
// JSON string, in Payload or in Producer::enqueue's overloads.
static_assert(streamq::detail::is_json_text_v<char[8]>);
static_assert(streamq::detail::is_json_text_v<const char*>);
static_assert(streamq::detail::is_json_text_v<std::string>);
static_assert(streamq::detail::is_json_text_v<std::string_view>);
static_assert(!streamq::detail::is_json_text_v<nlohmann::json>);
static_assert(!streamq::detail::is_json_text_v<nlohmann::ordered_json>);
static_assert(!streamq::detail::is_json_text_v<Resize>);
// Types nlohmann cannot convert do not compile as payloads (rather than failing at run time).
static_assert(!std::is_convertible_v<streamq::Task, Payload>);
static_assert(!std::is_convertible_v<std::unique_ptr<int>, Payload>);

TEST(Payload, JsonTextIsKeptExactlyAsGiven) {
  const std::string text = R"({ "to" : "a@b.c" })";
  EXPECT_EQ(Payload(R"({ "to" : "a@b.c" })").text(), text);
  EXPECT_EQ(Payload(text).text(), text);
  EXPECT_EQ(Payload(std::string_view(text)).text(), text);
  const TaskSpec spec{"t", R"({ "to" : "a@b.c" })"};
  EXPECT_EQ(spec.payload.text(), text);
  EXPECT_EQ(Payload(static_cast<const char*>(nullptr)).text(), "");
  EXPECT_EQ(TaskSpec{}.payload.text(), "");  // refused by enqueue_batch as not JSON
}

// Issue 8: `.payload = some_json_object` compiled (json -> std::string) and aborted at run time
// with an uncaught type_error. Now it is the JSON value's text.
TEST(Payload, JsonValueIsSerialised) {
  const nlohmann::json j{{"to", "a@b.c"}, {"n", 1}};
  const TaskSpec spec{.task_type = "t", .payload = j};
  EXPECT_EQ(spec.payload.text(), j.dump());
  TaskSpec later;
  later.payload = j;
  EXPECT_EQ(later.payload.text(), j.dump());
  EXPECT_EQ(Payload(nlohmann::json("just a string")).text(), R"("just a string")");
  EXPECT_EQ(Payload(nlohmann::json(42)).text(), "42");
  const nlohmann::ordered_json ordered{{"z", 1}, {"a", 2}};
  EXPECT_EQ(Payload(ordered).text(), R"({"z":1,"a":2})");
}

TEST(Payload, BracedListReadsAsNlohmannJsonReadsIt) {
  const TaskSpec spec{.task_type = "t", .payload = {{"to", "a@b.c"}, {"n", 1}}};
  EXPECT_EQ(spec.payload.text(), (nlohmann::json{{"to", "a@b.c"}, {"n", 1}}).dump());
  const TaskSpec array{.task_type = "t", .payload = {1, 2, 3}};
  EXPECT_EQ(array.payload.text(), "[1,2,3]");
}

TEST(Payload, TypedValueGoesThroughToJson) {
  EXPECT_EQ(Payload(Resize{"cat.png", 640}).text(), R"({"image":"cat.png","width":640})");
  const TaskSpec spec{.task_type = "resize", .payload = Resize{"cat.png", 640}};
  EXPECT_EQ(nlohmann::json::parse(spec.payload.text()).get<Resize>().width, 640);
  EXPECT_EQ(Payload(std::map<std::string, int>{{"a", 1}}).text(), R"({"a":1})");
  EXPECT_EQ(Payload(std::vector<int>{1, 2}).text(), "[1,2]");
}

TEST(Payload, ConversionFailuresArePayloadErrors) {
  try {
    Payload p = Unconvertible{};
    FAIL() << "no PayloadError";
  } catch (const streamq::PayloadError& e) {
    EXPECT_STREQ(e.what(), "payload conversion to JSON (to_json) failed: no JSON for this");
  }
  EXPECT_THROW(Payload p = ThrowsNonStd{}, streamq::PayloadError);
  // nlohmann refuses to dump a string that is not UTF-8 (type_error 316): not a raw
  // nlohmann::json::exception, not terminate.
  try {
    Payload p = nlohmann::json{{"name", "\xff\xfe"}};
    FAIL() << "no PayloadError";
  } catch (const streamq::PayloadError& e) {
    EXPECT_NE(std::string(e.what()).find("type_error.316"), std::string::npos) << e.what();
  }
}

streamq::Task task_with_payload(std::string payload) {
  auto fields = std::make_shared<const streamq::Fields>(
      streamq::Fields{{"task_id", "id-1"}, {"task_type", "resize"}, {"payload", std::move(payload)}});
  return streamq::detail::TaskFactory::make("1-0", fields, 1, {}, 0, 3);
}

TEST(PayloadAs, ConvertsWithFromJson) {
  const Resize r = streamq::payload_as<Resize>(task_with_payload(R"({"image":"a.png","width":3})"));
  EXPECT_EQ(r.image, "a.png");
  EXPECT_EQ(r.width, 3);
}

TEST(PayloadAs, AFailedConversionIsABadPayloadErrorWithTheReason) {
  for (const char* bad : {R"({"image":"a.png"})", R"({"image":"a.png","width":"wide"})", "[1,2]", "null"}) {
    try {
      streamq::payload_as<Resize>(task_with_payload(bad));
      FAIL() << "no BadPayloadError for " << bad;
    } catch (const streamq::PermanentError& e) {  // BadPayloadError is one: never retried
      EXPECT_NE(dynamic_cast<const streamq::BadPayloadError*>(&e), nullptr);
      EXPECT_EQ(std::string(e.what()).rfind(
                    "payload of task type \"resize\" does not convert: [json.exception.", 0),
                0u)
          << e.what();
    }
  }
}

}  // namespace
