// SPDX-License-Identifier: MIT
#include "record.hpp"

#include <array>
#include <charconv>

#include "codec.hpp"
#include "keys.hpp"

namespace streamq {
namespace {

constexpr std::array<std::string_view, 8> kStates = {"queued", "delayed", "running",   "retrying",
                                                     "done",   "dead",    "cancelled", "waiting"};

std::optional<std::chrono::system_clock::time_point> ms_time(std::string_view text) {
  std::int64_t ms = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

std::int64_t ms_of(const std::optional<std::chrono::system_clock::time_point>& t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count();
}

/// The ids of a `<length>:<id>...` list (a parent's flow_children in its record); what cannot be
/// read ends it (not written by streamq).
std::vector<std::string> counted_list(std::string_view text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::optional<std::string_view> id = detail::take_counted(text, at);
    if (!id) break;
    out.emplace_back(*id);
  }
  return out;
}

}  // namespace

std::string_view to_string(TaskRecord::State s) noexcept {
  const auto i = static_cast<std::size_t>(s);
  return i < kStates.size() ? kStates[i] : "unknown";
}

std::optional<TaskRecord::State> parse_record_state(std::string_view s) noexcept {
  for (std::size_t i = 0; i < kStates.size(); ++i) {
    if (kStates[i] == s) return static_cast<TaskRecord::State>(i);
  }
  return std::nullopt;
}

nlohmann::json TaskRecord::result_json() const { return nlohmann::json::parse(result.value()); }

std::string TaskRecord::to_json() const {
  nlohmann::ordered_json j = {{"task_id", task_id},   {"task_type", task_type}, {"state", to_string(state)},
                              {"attempts", attempts}, {"worker", worker},       {"error", error},
                              {"reason", reason},     {"queue", queue}};
  const auto time = [&](const char* name, const std::optional<std::chrono::system_clock::time_point>& t) {
    j[name] = t ? nlohmann::ordered_json(ms_of(t)) : nlohmann::ordered_json(nullptr);
  };
  time("enqueued_at_ms", enqueued_at);
  time("started_at_ms", started_at);
  time("finished_at_ms", finished_at);
  time("due_at_ms", due_at);
  // What a handler wrote is JSON as a rule (a typed handler's return, set_progress): a JSON value
  // then, its text as a string otherwise (set_result's bytes may be anything).
  const auto value = [](const std::optional<std::string>& text) {
    if (!text) return nlohmann::ordered_json(nullptr);
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(*text, nullptr, false);
    return parsed.is_discarded() ? nlohmann::ordered_json(*text) : parsed;
  };
  j["result"] = value(result);
  j["progress"] = value(progress);
  if (!parent.empty()) j["parent"] = parent;
  if (!parent_queue.empty()) j["parent_queue"] = parent_queue;
  if (!children.empty()) j["children"] = children;
  if (!child_queues.empty()) j["child_queues"] = child_queues;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

namespace detail {

std::map<std::string, std::string> parse_child_queues(std::string_view text) {
  const std::vector<std::string> pairs = counted_list(text);
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) out[pairs[i]] = pairs[i + 1];
  return out;
}

std::optional<TaskRecord> parse_record(const ReplyView& v, std::string_view task_id,
                                       const std::string& queue) {
  if (!v.is_array() || v.size() == 0) return std::nullopt;
  TaskRecord r;
  r.task_id = std::string(task_id);
  r.queue = queue;
  for (std::size_t i = 0; i + 1 < v.size(); i += 2) {
    const std::string_view name = v[i].str();
    const std::string_view value = v[i + 1].str();
    if (name == "state") {
      // A state this version does not know (a newer writer's) reads as running: not finished.
      r.state = parse_record_state(value).value_or(TaskRecord::State::running);
    } else if (name == "type") {
      r.task_type = std::string(value);
    } else if (name == "attempts") {
      std::from_chars(value.data(), value.data() + value.size(), r.attempts);
    } else if (name == "enqueued_at") {
      r.enqueued_at = ms_time(value);
    } else if (name == "started_at") {
      r.started_at = ms_time(value);
    } else if (name == "finished_at") {
      r.finished_at = ms_time(value);
    } else if (name == "due_at") {
      r.due_at = ms_time(value);
    } else if (name == "worker") {
      r.worker = std::string(value);
    } else if (name == "error") {
      r.error = std::string(value);
    } else if (name == "reason") {
      r.reason = std::string(value);
    } else if (name == "result") {
      r.result = std::string(value);
    } else if (name == "progress") {
      r.progress = std::string(value);
    } else if (name == "flow_parent") {
      r.parent = std::string(value);
    } else if (name == "flow_home") {
      r.parent_queue = std::string(value);
    } else if (name == "flow_children") {
      r.children = counted_list(value);
    } else if (name == "flow_queues") {
      r.child_queues = parse_child_queues(value);
    }
  }
  return r;
}

QueueEvent parse_event(const ReplyView& entry, const std::string& queue) {
  QueueEvent e;
  e.id = std::string(entry[0].str());
  e.queue = queue;
  const ReplyView f = entry[1];
  for (std::size_t i = 0; i + 1 < f.size(); i += 2) {
    const std::string_view name = f[i].str();
    const std::string_view value = f[i + 1].str();
    if (name == "event") {
      e.event = std::string(value);
    } else if (name == "task_id") {
      e.task_id = std::string(value);
    } else if (name == "at") {
      e.at = ms_time(value).value_or(std::chrono::system_clock::time_point{});
    } else {
      e.fields.emplace_back(std::string(name), std::string(value));
    }
  }
  return e;
}

bool is_final_event(std::string_view event) noexcept {
  return event == "done" || event == "dead" || event == "cancelled";
}

}  // namespace detail
}  // namespace streamq
