// SPDX-License-Identifier: MIT
// TaskRecord::to_json: a result or progress that is JSON is a JSON value of the object (not a
// string holding JSON), anything else its text, none null; times in ms since the Unix epoch. A
// flow's links across queues: a parent's children in other queues, a queue's name in one form.
#include <chrono>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <streamq/record.hpp>

#include "wire/keys.hpp"
#include "wire/record.hpp"

namespace streamq {
namespace {

TEST(TaskRecordJson, AResultAndProgressThatAreJsonAreJsonValues) {
  TaskRecord r;
  r.task_id = "t1";
  r.state = TaskRecord::State::done;
  r.result = R"({"sum":42,"parts":[1,2]})";
  r.progress = "0.5";
  r.finished_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123));
  const nlohmann::json j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j["result"], nlohmann::json::parse(R"({"sum":42,"parts":[1,2]})"));
  EXPECT_EQ(j["progress"], 0.5);
  EXPECT_EQ(j["state"], "done");
  EXPECT_EQ(j["finished_at_ms"], 1700000000123);
}

TEST(TaskRecordJson, AResultThatIsNotJsonIsItsTextAndNoneIsNull) {
  TaskRecord r;
  r.result = "plain bytes, not JSON {";
  const nlohmann::json j = nlohmann::json::parse(r.to_json());
  EXPECT_EQ(j["result"], "plain bytes, not JSON {");
  EXPECT_TRUE(j["progress"].is_null());
  EXPECT_TRUE(j["started_at_ms"].is_null());
}

TEST(FlowLinks, AParentsChildrenInOtherQueuesAreReadByIdAndWhatCannotBeReadEndsTheList) {
  EXPECT_EQ(detail::parse_child_queues("2:c13:gpu2:c24:{io}"),
            (std::map<std::string, std::string>{{"c1", "gpu"}, {"c2", "{io}"}}));
  EXPECT_EQ(detail::parse_child_queues("2:c13:gpu9:broken"),
            (std::map<std::string, std::string>{{"c1", "gpu"}}));
  EXPECT_TRUE(detail::parse_child_queues("").empty());
}

TEST(FlowLinks, AQueuesNameHasOneFormPerQueue) {
  EXPECT_EQ(detail::queue_name("{gpu}", 4), "gpu") << "a partitioned queue's name without braces";
  EXPECT_EQ(detail::queue_name("gpu", 4), "gpu");
  EXPECT_EQ(detail::queue_name("{gpu}", 1), "{gpu}") << "one partition: its keys are the name's";
  EXPECT_EQ(detail::queue_name("gpu", 1), "gpu");
}

}  // namespace
}  // namespace streamq
