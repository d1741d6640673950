// SPDX-License-Identifier: MIT
#include "streamq/task.hpp"

namespace streamq {
namespace {
const std::string empty_value;
const Fields empty_fields;
}  // namespace

Task::Task(std::string entry_id, std::shared_ptr<const Fields> fields, nlohmann::json payload,
           std::int64_t deliveries, std::chrono::system_clock::time_point created_at, int retry_count,
           int max_retries, std::stop_token stop)
    : entry_id_(std::move(entry_id)),
      fields_(std::move(fields)),
      payload_(std::move(payload)),
      deliveries_(deliveries),
      created_at_(created_at),
      retry_count_(retry_count),
      max_retries_(max_retries),
      stop_(std::move(stop)) {
  const Fields& f = this->fields();
  for (std::size_t i = 0; i < f.size(); ++i) {
    const std::string& name = f[i].first;
    if (name == field::task_id) id_index_ = i;
    else if (name == field::task_type) type_index_ = i;
    else if (name == field::payload) payload_index_ = i;
  }
}

Task::Task(std::string entry_id, Fields fields, nlohmann::json payload, std::int64_t deliveries,
           std::chrono::system_clock::time_point created_at, int retry_count, int max_retries,
           std::stop_token stop)
    : Task(std::move(entry_id), std::make_shared<const Fields>(std::move(fields)), std::move(payload),
           deliveries, created_at, retry_count, max_retries, std::move(stop)) {}

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

}  // namespace streamq
