// SPDX-License-Identifier: MIT
#include "streamq/task.hpp"

namespace streamq {
namespace {
const std::string empty_value;
}

Task::Task(std::string entry_id, Fields fields, nlohmann::json payload, std::int64_t deliveries,
           std::chrono::system_clock::time_point created_at, int retry_count, int max_retries)
    : entry_id_(std::move(entry_id)),
      fields_(std::move(fields)),
      payload_(std::move(payload)),
      deliveries_(deliveries),
      created_at_(created_at),
      retry_count_(retry_count),
      max_retries_(max_retries) {
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    const std::string& name = fields_[i].first;
    if (name == field::task_id) id_index_ = i;
    else if (name == field::task_type) type_index_ = i;
    else if (name == field::payload) payload_index_ = i;
  }
}

const std::string& Task::value_at(std::size_t index) const noexcept {
  return index < fields_.size() ? fields_[index].second : empty_value;
}

std::optional<std::string_view> Task::field(std::string_view name) const noexcept {
  for (const auto& [key, value] : fields_) {
    if (key == name) return std::string_view(value);
  }
  return std::nullopt;
}

}  // namespace streamq
