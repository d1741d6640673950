// SPDX-License-Identifier: MIT
#include "task_reports.hpp"

#include "log.hpp"
#include "redis/scripts.hpp"
#include "task_control.hpp"
#include "wire/keys.hpp"

namespace streamq {

namespace detail {

TaskReports::TaskReports(const Shared& s, std::unique_ptr<Channel>& channel, std::mutex* channel_lock,
                         std::string queue, std::string task_id, std::int64_t attempt)
    : write_([&s, &channel, channel_lock, queue = std::move(queue), task_id = std::move(task_id),
              attempt = std::to_string(attempt)](std::string_view what, const std::string& value) {
        const std::string key = task_key(queue, task_id);
        std::unique_lock<std::mutex> lock;
        if (channel_lock != nullptr) lock = std::unique_lock(*channel_lock);
        try {
          if (!channel) channel = std::make_unique<Channel>(s.connection);
          Argv argv = channel->scripts.begin(ScriptId::report, 1);
          argv.add(key).add(queue).add(what).add(value).add(task_id).add(s.consumer_name).add(attempt);
          return channel->scripts.call(ScriptId::report, argv).view().check().integer() == 1;
        } catch (const std::exception& e) {
          channel.reset();  // rebuilt on the next need
          log(LogLevel::warning,
              "task " + task_id + ": its " + std::string(what) + " could not be written: " + e.what());
          return false;
        }
      }) {}

void TaskReports::set_result(std::string bytes) {
  std::lock_guard lock(mutex_);
  if (open_) result_ = std::move(bytes);
}

bool TaskReports::write(std::string_view what, const std::string& value) {
  std::lock_guard lock(mutex_);
  if (!open_) return false;
  if (what == "result") result_ = value;
  return write_(what, value);
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
