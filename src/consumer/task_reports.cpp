// SPDX-License-Identifier: MIT
#include "task_reports.hpp"

#include <algorithm>
#include <utility>

#include "task_control.hpp"

namespace streamq {

namespace detail {

ReportBox::Hold ReportBox::hold(std::string_view what, std::string value) {
  std::lock_guard lock(mutex_);
  if (refused_ || closed_) return {};
  (what == "result" ? held_.result : held_.progress) = std::move(value);
  if (queued_) return {true, std::nullopt};
  queued_ = true;
  return {true, std::max(Clock::now(), next_write_)};
}

ReportBox::Held ReportBox::take(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  queued_ = false;
  next_write_ = now + kReportEvery;
  return std::exchange(held_, Held{});
}

bool ReportBox::put_back(Held held) {
  std::lock_guard lock(mutex_);
  if (refused_) return false;
  if (!held_.progress) held_.progress = std::move(held.progress);
  if (!held_.result) held_.result = std::move(held.result);
  if (queued_ || held_.empty()) return false;
  queued_ = true;
  return true;
}

void ReportBox::refuse() {
  std::lock_guard lock(mutex_);
  refused_ = true;
  held_ = {};
}

std::optional<Clock::time_point> ReportBox::close(bool drop_held) {
  std::lock_guard lock(mutex_);
  closed_ = true;
  if (drop_held) held_ = {};
  if (held_.empty()) return std::nullopt;
  queued_ = true;
  return Clock::now();
}

void TaskReports::set_result(std::string bytes) {
  std::lock_guard lock(mutex_);
  if (open_) result_ = std::move(bytes);
}

bool TaskReports::write(std::string_view what, const std::string& value) {
  std::lock_guard lock(mutex_);
  if (!open_) return false;
  if (what == "result") result_ = value;
  if (!box_) return write_(what, value);
  const ReportBox::Hold h = box_->hold(what, value);
  if (h.due) s_->inflight.report_due(box_, *h.due);
  return h.accepted;
}

std::optional<std::string> TaskReports::close(bool drop_held) {
  std::lock_guard lock(mutex_);
  if (open_ && box_) {
    if (const auto due = box_->close(drop_held)) s_->inflight.report_due(box_, *due);
  }
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
