// SPDX-License-Identifier: MIT
// What a running tracked task sends about itself (Task::set_result, write_partial_result,
// set_progress): the final result, kept for its completion, and the reports, held for the
// completer to write (report_box.hpp), or, in a process executor's child, sent to the worker,
// which holds them so. Closed when the handler returns, so a copy of the Task kept past that
// writes nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "report_box.hpp"
#include "shared.hpp"

namespace streamq::detail {

class TaskReports {
 public:
  /// A worker's: reports go to `box`, which the completer writes.
  TaskReports(Shared& s, std::shared_ptr<ReportBox> box) : s_(&s), box_(std::move(box)) {}
  /// Writes what `write(what, value)` is given (true when it was written): a child's reports,
  /// sent to its worker.
  using Writer = std::function<bool(std::string_view what, const std::string& value)>;
  explicit TaskReports(Writer write) : write_(std::move(write)) {}

  void set_result(std::string bytes);
  /// Reports `value` as the record's `what` ("progress" or "result"); see Task. True when it
  /// is written or held to be.
  bool write(std::string_view what, const std::string& value);
  /// After the handler returned: what is held is written next (ahead of the completion), or
  /// dropped with `drop_held` (a task given up on); no more reports. The result it ends with,
  /// if one was set.
  std::optional<std::string> close(bool drop_held = false);

 private:
  Shared* s_ = nullptr;
  std::shared_ptr<ReportBox> box_;
  Writer write_;
  std::mutex mutex_;
  std::optional<std::string> result_;
  bool open_ = true;
};

/// Attaches reports to a Task (Task's private member).
struct TaskAccess {
  static void attach(Task& task, std::shared_ptr<TaskReports> reports) { task.reports_ = std::move(reports); }
  static const std::shared_ptr<const Fields>& fields(const Task& task) { return task.fields_; }
  /// The task's own stop source and stop reason (TaskControl) replace the worker's token.
  static void attach(Task& task, const std::shared_ptr<TaskControl>& control);
};

}  // namespace streamq::detail
