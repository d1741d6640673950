// SPDX-License-Identifier: MIT
#include "task_reports.hpp"

#include "log.hpp"
#include "redis/scripts.hpp"
#include "task_control.hpp"
#include "wire/keys.hpp"

namespace streamq {

namespace detail {

TaskReports::TaskReports(const Shared& s, std::unique_ptr<Channel>& channel, std::string queue,
                         std::string task_id, std::int64_t attempt)
    : s_(s),
      channel_(channel),
      queue_(std::move(queue)),
      task_id_(std::move(task_id)),
      attempt_(std::to_string(attempt)),
      key_(task_key(queue_, task_id_)) {}

void TaskReports::set_result(std::string bytes) {
  std::lock_guard lock(mutex_);
  if (open_) result_ = std::move(bytes);
}

bool TaskReports::write(std::string_view what, const std::string& value) {
  std::lock_guard lock(mutex_);
  if (!open_) return false;
  if (what == "result") result_ = value;
  try {
    if (!channel_) channel_ = std::make_unique<Channel>(s_.connection);
    Argv argv = channel_->scripts.begin(ScriptId::report, 1);
    argv.add(key_).add(queue_).add(what).add(value).add(task_id_).add(s_.consumer_name).add(attempt_);
    return channel_->scripts.call(ScriptId::report, argv).view().check().integer() == 1;
  } catch (const std::exception& e) {
    channel_.reset();  // rebuilt on the next need
    log(LogLevel::warning,
        "task " + task_id_ + ": its " + std::string(what) + " could not be written: " + e.what());
    return false;
  }
}

std::optional<std::string> TaskReports::close() {
  std::lock_guard lock(mutex_);
  open_ = false;
  return std::move(result_);
}

}  // namespace detail

bool Task::tracked() const noexcept { return reports_ != nullptr; }

std::string_view Task::stop_reason() const noexcept {
  return control_ ? detail::to_string(control_->why()) : std::string_view();
}

void detail::TaskAccess::attach(Task& task, const std::shared_ptr<TaskControl>& control) {
  task.stop_ = control->stop.get_token();
  task.control_ = control;
}

void Task::set_result(std::string bytes) const {
  if (reports_) reports_->set_result(std::move(bytes));
}

bool Task::write_partial_result(const std::string& bytes) const {
  return reports_ && reports_->write("result", bytes);
}

bool Task::set_progress(const nlohmann::json& progress) const {
  return reports_ &&
         reports_->write("progress", progress.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace streamq
