// SPDX-License-Identifier: MIT
#include "streamq/task.hpp"

#include <stdexcept>

#include "codec.hpp"
#include "task_factory.hpp"

namespace streamq {
namespace {
const std::string empty_value;
const Fields empty_fields;
}  // namespace

Task::Task(std::string entry_id, std::shared_ptr<const Fields> fields, std::int64_t deliveries,
           std::chrono::system_clock::time_point created_at, int retry_count, int max_retries,
           std::stop_token stop)
    : entry_id_(std::move(entry_id)),
      fields_(std::move(fields)),
      json_state_(json_unparsed),
      deliveries_(deliveries),
      created_at_(created_at),
      retry_count_(retry_count),
      max_retries_(max_retries),
      stop_(std::move(stop)) {
  const Fields& f = this->fields();
  for (std::size_t i = 0; i < f.size(); ++i) {
    const std::string& name = f[i].first;
    if (name == field::task_id)
      id_index_ = i;
    else if (name == field::task_type)
      type_index_ = i;
    else if (name == field::payload)
      payload_index_ = i;
  }
}

Task detail::TaskFactory::make(std::string entry_id, std::shared_ptr<const Fields> fields,
                               std::int64_t deliveries, std::chrono::system_clock::time_point created_at,
                               int retry_count, int max_retries, std::stop_token stop) {
  return Task(std::move(entry_id), std::move(fields), deliveries, created_at, retry_count, max_retries,
              std::move(stop));
}

Task::Task(const Task& o)
    : entry_id_(o.entry_id_),
      fields_(o.fields_),
      id_index_(o.id_index_),
      type_index_(o.type_index_),
      payload_index_(o.payload_index_),
      deliveries_(o.deliveries_),
      created_at_(o.created_at_),
      retry_count_(o.retry_count_),
      max_retries_(o.max_retries_),
      stop_(o.stop_),
      reports_(o.reports_) {
  // A payload another thread is parsing right now is parsed again by the copy when needed.
  if (o.json_state_.load(std::memory_order_acquire) == json_ready) {
    payload_ = o.payload_;
    json_state_.store(json_ready, std::memory_order_relaxed);
  } else {
    json_state_.store(json_unparsed, std::memory_order_relaxed);
  }
}

Task& Task::operator=(const Task& o) {
  if (this != &o) *this = Task(o);
  return *this;
}

Task::Task(Task&& o) noexcept
    : entry_id_(std::move(o.entry_id_)),
      fields_(std::move(o.fields_)),
      id_index_(o.id_index_),
      type_index_(o.type_index_),
      payload_index_(o.payload_index_),
      payload_(std::move(o.payload_)),
      json_state_(o.json_state_.load(std::memory_order_acquire) == json_ready ? json_ready : json_unparsed),
      deliveries_(o.deliveries_),
      created_at_(o.created_at_),
      retry_count_(o.retry_count_),
      max_retries_(o.max_retries_),
      stop_(std::move(o.stop_)),
      reports_(std::move(o.reports_)) {}

Task& Task::operator=(Task&& o) noexcept {
  entry_id_ = std::move(o.entry_id_);
  fields_ = std::move(o.fields_);
  id_index_ = o.id_index_;
  type_index_ = o.type_index_;
  payload_index_ = o.payload_index_;
  payload_ = std::move(o.payload_);
  json_state_.store(o.json_state_.load(std::memory_order_acquire) == json_ready ? json_ready : json_unparsed,
                    std::memory_order_relaxed);
  deliveries_ = o.deliveries_;
  created_at_ = o.created_at_;
  retry_count_ = o.retry_count_;
  max_retries_ = o.max_retries_;
  stop_ = std::move(o.stop_);
  reports_ = std::move(o.reports_);
  return *this;
}

const nlohmann::json& Task::json() const {
  std::uint8_t state = json_state_.load(std::memory_order_acquire);
  if (state == json_ready) return payload_;
  if (state == json_unparsed &&
      json_state_.compare_exchange_strong(state, json_parsing, std::memory_order_acquire)) {
    try {
      // The consumer validated the payload with the producer's scanner, which accepts exactly
      // what nlohmann accepts: this parse does not fail.
      payload_ = nlohmann::json::parse(payload(), nullptr, /*allow_exceptions=*/false);
    } catch (...) {
      json_state_.store(json_unparsed, std::memory_order_release);
      json_state_.notify_all();
      throw;
    }
    json_state_.store(json_ready, std::memory_order_release);
    json_state_.notify_all();
    return payload_;
  }
  // Another thread is parsing (or just failed to): wait for it, or take over.
  while ((state = json_state_.load(std::memory_order_acquire)) != json_ready) {
    if (state == json_unparsed) return json();
    json_state_.wait(state, std::memory_order_acquire);
  }
  return payload_;
}

const Fields& Task::fields() const noexcept { return fields_ ? *fields_ : empty_fields; }

const std::string& Task::value_at(std::size_t index) const noexcept {
  const Fields& f = fields();
  return index < f.size() ? f[index].second : empty_value;
}

std::optional<std::string_view> Task::field(std::string_view name) const noexcept {
  for (const auto& [key, value] : fields()) {
    if (key == name) return std::string_view(value);
  }
  return std::nullopt;
}

namespace {

/// The next `<length>:<bytes>` of a flow_children field, from `at` on (moved past it).
std::string_view take_part(std::string_view text, std::size_t& at) {
  const std::optional<std::string_view> got = detail::take_counted(text, at);
  if (!got) throw std::runtime_error("malformed flow_children field at byte " + std::to_string(at));
  return *got;
}

}  // namespace

std::vector<ChildResult> Task::children_results() const {
  const std::optional<std::string_view> text = field(field::flow_children);
  if (!text) return {};
  return detail::parse_children(*text);
}

std::vector<ChildResult> detail::parse_children(std::string_view text) {
  std::vector<ChildResult> out;
  // Per child: <length>:<id><length>:<outcome>, the outcome 'd' + result, or 'x' + state + ' ' + error.
  for (std::size_t at = 0; at < text.size();) {
    ChildResult child;
    child.task_id = take_part(text, at);
    const std::string_view outcome = take_part(text, at);
    if (outcome.starts_with('d')) {
      child.state = "done";
      child.result = outcome.substr(1);
    } else if (outcome.starts_with('x')) {
      const std::size_t space = outcome.find(' ');
      child.state = outcome.substr(1, space == std::string_view::npos ? std::string_view::npos : space - 1);
      if (space != std::string_view::npos) child.error = outcome.substr(space + 1);
    } else {
      throw std::runtime_error("malformed flow_children field: outcome of child " + child.task_id);
    }
    out.push_back(std::move(child));
  }
  return out;
}

}  // namespace streamq
