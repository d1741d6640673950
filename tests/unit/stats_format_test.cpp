// SPDX-License-Identifier: MIT
// QueueStats rendering: the Prometheus text exposition a scraper reads and the JSON document
// the stats tool prints.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "streamq/stats.hpp"

namespace {

using nlohmann::json;
using streamq::ConsumerInfo;
using streamq::GroupInfo;
using streamq::QueueStats;

// A stream name with characters Prometheus label values must escape.
const std::string kStream = "orders \"eu\" \\ main";
// The same, as it must appear inside a label value.
const std::string kStreamLabel = R"(stream="orders \"eu\" \\ main")";

QueueStats sample_stats() {
  QueueStats st;
  st.stream = kStream;
  st.exists = true;
  st.length = 17;
  st.entries_added = 4200;
  st.pending_total = 5;
  st.dlq_length = 2;
  st.delayed = 3;
  st.oldest_entry_id = "1700000000000-0";
  st.oldest_entry_age_ms = 90500;

  GroupInfo workers;
  workers.name = "workers";
  workers.pending = 5;
  workers.lag = 12;
  workers.last_delivered_id = "1700000000000-3";
  workers.consumers = {ConsumerInfo{"w1", 3, 1500}, ConsumerInfo{"w2", 2, 250}};
  workers.oldest_pending_idle_ms = 42000;

  GroupInfo audit;
  audit.name = "audit";
  audit.pending = 0;
  audit.last_delivered_id = "0-0";
  audit.consumers = {ConsumerInfo{"line\nbreak", 0, 61000}};
  // lag and oldest_pending_idle_ms unset

  st.groups = {workers, audit};
  return st;
}

struct Sample {
  std::string name;
  std::string labels;  // the text between the braces
  std::string value;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // metric -> gauge|counter
  std::set<std::string> helps;
};

// Parses and validates the text format line by line; every violation is a test failure.
Exposition parse_exposition(const std::string& text) {
  static const std::regex help_re(R"(^# HELP (streamq_[a-z_]+) \S.*$)");
  static const std::regex type_re(R"(^# TYPE (streamq_[a-z_]+) (gauge|counter)$)");
  static const std::regex sample_re(
      R"re(^(streamq_[a-z_]+)\{((?:[a-z_]+="(?:[^"\\\n]|\\.)*",?)*)\} (-?[0-9.e+-]+)$)re");
  Exposition out;
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the last line must end with a newline";
  std::istringstream in(text);
  std::string line;
  std::set<std::string> finished;  // families whose samples are over
  std::string current;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help_re)) {
      EXPECT_TRUE(out.helps.insert(m[1]).second) << "second HELP for " << m[1];
      continue;
    }
    if (std::regex_match(line, m, type_re)) {
      EXPECT_TRUE(out.types.emplace(m[1], m[2]).second) << "second TYPE for " << m[1];
      continue;
    }
    if (!std::regex_match(line, m, sample_re)) {
      ADD_FAILURE() << "malformed line: [" << line << "]";
      continue;
    }
    const std::string name = m[1];
    EXPECT_EQ(out.helps.count(name), 1u) << "no HELP before " << line;
    EXPECT_EQ(out.types.count(name), 1u) << "no TYPE before " << line;
    if (name != current) {
      EXPECT_EQ(finished.count(name), 0u) << "samples of " << name << " are not grouped";
      if (!current.empty()) finished.insert(current);
      current = name;
    }
    out.samples.push_back({name, m[2], m[3]});
  }
  return out;
}

// The value of the one sample with this name and exact label text; fails if not exactly one.
double value_of(const Exposition& e, const std::string& name, const std::string& labels) {
  const Sample* found = nullptr;
  int count = 0;
  for (const Sample& s : e.samples) {
    if (s.name == name && s.labels == labels) {
      found = &s;
      ++count;
    }
  }
  EXPECT_EQ(count, 1) << name << "{" << labels << "}";
  return found != nullptr ? std::stod(found->value) : -1.0;
}

int count_of(const Exposition& e, const std::string& name) {
  int n = 0;
  for (const Sample& s : e.samples) n += s.name == name ? 1 : 0;
  return n;
}

std::string group_labels(const std::string& group) { return kStreamLabel + ",group=\"" + group + "\""; }

TEST(Prometheus, EveryLineIsWellFormed) {
  const Exposition e = parse_exposition(sample_stats().to_prometheus());
  EXPECT_FALSE(e.samples.empty());
  for (const auto& [name, type] : e.types) {
    EXPECT_EQ(e.helps.count(name), 1u) << name;
    // Prometheus naming: a counter's name ends in _total.
    if (type == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << name;
    }
  }
}

TEST(Prometheus, LabelValuesAreEscaped) {
  const std::string text = sample_stats().to_prometheus();
  EXPECT_NE(text.find(kStreamLabel), std::string::npos) << text;
  EXPECT_NE(text.find(R"(consumer="line\nbreak")"), std::string::npos) << text;
  EXPECT_EQ(text.find("line\nbreak"), std::string::npos) << "raw newline in a label";
  const Exposition e = parse_exposition(text);
  for (const Sample& s : e.samples) {
    EXPECT_EQ(s.labels.rfind(kStreamLabel, 0), 0u) << s.name << "{" << s.labels << "}";
  }
}

TEST(Prometheus, StreamLevelValues) {
  const Exposition e = parse_exposition(sample_stats().to_prometheus());
  EXPECT_EQ(value_of(e, "streamq_stream_length", kStreamLabel), 17);
  EXPECT_EQ(value_of(e, "streamq_entries_added_total", kStreamLabel), 4200);
  EXPECT_EQ(value_of(e, "streamq_pending", kStreamLabel), 5);
  EXPECT_EQ(value_of(e, "streamq_dlq_length", kStreamLabel), 2);
  EXPECT_EQ(value_of(e, "streamq_delayed", kStreamLabel), 3);
  EXPECT_DOUBLE_EQ(value_of(e, "streamq_oldest_entry_age_seconds", kStreamLabel), 90.5);
  EXPECT_EQ(e.types.at("streamq_entries_added_total"), "counter");
  EXPECT_EQ(e.types.at("streamq_stream_length"), "gauge");
}

TEST(Prometheus, GroupValues) {
  const Exposition e = parse_exposition(sample_stats().to_prometheus());
  EXPECT_EQ(value_of(e, "streamq_group_pending", group_labels("workers")), 5);
  EXPECT_EQ(value_of(e, "streamq_group_pending", group_labels("audit")), 0);
  EXPECT_EQ(value_of(e, "streamq_group_consumers", group_labels("workers")), 2);
  EXPECT_EQ(value_of(e, "streamq_group_consumers", group_labels("audit")), 1);
  EXPECT_DOUBLE_EQ(value_of(e, "streamq_oldest_pending_idle_seconds", group_labels("workers")), 42);
}

TEST(Prometheus, LagOnlyForGroupsThatKnowIt) {
  const Exposition e = parse_exposition(sample_stats().to_prometheus());
  EXPECT_EQ(count_of(e, "streamq_group_lag"), 1);
  EXPECT_EQ(value_of(e, "streamq_group_lag", group_labels("workers")), 12);
  for (const Sample& s : e.samples) {
    if (s.name == "streamq_group_lag") {
      EXPECT_EQ(s.labels.find("audit"), std::string::npos);
    }
  }
}

TEST(Prometheus, ConsumerValuesInSeconds) {
  const Exposition e = parse_exposition(sample_stats().to_prometheus());
  const std::string w = group_labels("workers") + ",consumer=";
  EXPECT_EQ(value_of(e, "streamq_consumer_pending", w + "\"w1\""), 3);
  EXPECT_EQ(value_of(e, "streamq_consumer_pending", w + "\"w2\""), 2);
  EXPECT_DOUBLE_EQ(value_of(e, "streamq_consumer_idle_seconds", w + "\"w1\""), 1.5);
  EXPECT_DOUBLE_EQ(value_of(e, "streamq_consumer_idle_seconds", w + "\"w2\""), 0.25);
  const std::string a = group_labels("audit") + R"(,consumer="line\nbreak")";
  EXPECT_DOUBLE_EQ(value_of(e, "streamq_consumer_idle_seconds", a), 61);
  EXPECT_EQ(count_of(e, "streamq_consumer_pending"), 3);
  EXPECT_EQ(count_of(e, "streamq_consumer_idle_seconds"), 3);
}

TEST(Prometheus, MissingStreamIsStillValid) {
  QueueStats st;
  st.stream = "ghost";
  const Exposition e = parse_exposition(st.to_prometheus());
  EXPECT_EQ(value_of(e, "streamq_stream_length", R"(stream="ghost")"), 0);
  EXPECT_EQ(value_of(e, "streamq_oldest_entry_age_seconds", R"(stream="ghost")"), 0);
  EXPECT_EQ(count_of(e, "streamq_group_pending"), 0);
  EXPECT_EQ(count_of(e, "streamq_consumer_pending"), 0);
}

// ---------------------------------------------------------------- JSON

TEST(StatsJson, DocumentShape) {
  const json doc = json::parse(sample_stats().to_json());
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.at("stream"), kStream);
  EXPECT_EQ(doc.at("exists"), true);
  EXPECT_EQ(doc.at("queue_length"), 17);
  EXPECT_EQ(doc.at("entries_added"), 4200);
  EXPECT_EQ(doc.at("pending_total"), 5);
  EXPECT_EQ(doc.at("consumers_active"), 3);  // 2 + 1 over both groups
  EXPECT_EQ(doc.at("dlq_length"), 2);
  EXPECT_EQ(doc.at("delayed"), 3);
  EXPECT_EQ(doc.at("oldest_message"), "1700000000000-0");
  EXPECT_EQ(doc.at("oldest_entry_age_ms"), 90500);

  const json& groups = doc.at("groups");
  ASSERT_TRUE(groups.is_array());
  ASSERT_EQ(groups.size(), 2u);
  const json& w = groups[0];
  EXPECT_EQ(w.at("name"), "workers");
  EXPECT_EQ(w.at("pending"), 5);
  EXPECT_EQ(w.at("lag"), 12);
  EXPECT_EQ(w.at("last_delivered_id"), "1700000000000-3");
  EXPECT_EQ(w.at("oldest_pending_idle_ms"), 42000);
  ASSERT_EQ(w.at("consumers").size(), 2u);
  EXPECT_EQ(w.at("consumers")[0], json({{"name", "w1"}, {"pending", 3}, {"idle_ms", 1500}}));
  EXPECT_EQ(w.at("consumers")[1], json({{"name", "w2"}, {"pending", 2}, {"idle_ms", 250}}));

  const json& a = groups[1];
  EXPECT_EQ(a.at("name"), "audit");
  EXPECT_EQ(a.at("pending"), 0);
  EXPECT_TRUE(a.at("lag").is_null());
  EXPECT_TRUE(a.at("oldest_pending_idle_ms").is_null());
  EXPECT_EQ(a.at("last_delivered_id"), "0-0");
  ASSERT_EQ(a.at("consumers").size(), 1u);
  EXPECT_EQ(a.at("consumers")[0].at("name"), "line\nbreak");
  EXPECT_EQ(a.at("consumers")[0].at("idle_ms"), 61000);
}

TEST(StatsJson, EmptyStreamHasNullOldestMessage) {
  QueueStats st;
  st.stream = "ghost";
  const json doc = json::parse(st.to_json());
  EXPECT_EQ(doc.at("exists"), false);
  EXPECT_TRUE(doc.at("oldest_message").is_null());
  EXPECT_TRUE(doc.at("oldest_entry_age_ms").is_null());
  EXPECT_EQ(doc.at("queue_length"), 0);
  EXPECT_EQ(doc.at("consumers_active"), 0);
  EXPECT_EQ(doc.at("groups"), json::array());
}

TEST(StatsJson, LargeCountsAreExact) {
  QueueStats st = sample_stats();
  st.length = 9007199254740993;  // beyond double precision: must stay an integer
  st.entries_added = 1234567890123;
  const json doc = json::parse(st.to_json());
  EXPECT_EQ(doc.at("queue_length").get<std::int64_t>(), 9007199254740993);
  EXPECT_EQ(doc.at("entries_added").get<std::int64_t>(), 1234567890123);
}

TEST(StatsJson, NonUtf8NamesDoNotBreakTheDocument) {
  // Redis key names are bytes; the report must still be valid JSON.
  QueueStats st = sample_stats();
  st.stream = "bad\xff\xfename";
  st.groups[0].consumers[0].name = "\xc3";
  std::string text;
  ASSERT_NO_THROW(text = st.to_json());
  const json doc = json::parse(text);
  EXPECT_TRUE(doc.at("stream").get<std::string>().starts_with("bad"));
  EXPECT_TRUE(doc.at("stream").get<std::string>().ends_with("name"));
}

TEST(Prometheus, LargeValuesAreExact) {
  streamq::QueueStats st;
  st.stream = "q";
  st.exists = true;
  st.entries_added = 1234567890123;
  st.length = 10000001;
  st.oldest_entry_age_ms = 1234567;
  const std::string text = st.to_prometheus();
  EXPECT_NE(text.find("streamq_entries_added_total{stream=\"q\"} 1234567890123\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("streamq_stream_length{stream=\"q\"} 10000001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("streamq_oldest_entry_age_seconds{stream=\"q\"} 1234.567\n"), std::string::npos)
      << text;
}

}  // namespace
