// SPDX-License-Identifier: MIT
// What a running tracked task sends about itself (Task::set_result, write_partial_result,
// set_progress): the final result, kept for its completion, and the reports written at once
// (report.lua) on its handler thread's connection, or, in a process executor's child, sent to
// the worker, which writes them. Closed when the handler returns, so a copy of the Task kept past
// that writes nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "executor.hpp"
#include "shared.hpp"

namespace streamq::detail {

class TaskReports {
 public:
  /// `channel` is the handler thread's (made on first need), or, with `channel_lock`, the one
  /// the asynchronous handlers' attempts share, used under that lock; `queue` the partition's
  /// stream; `attempt` the attempt's number in the record (running.lua; 0: unknown, nothing is
  /// written): a report is written only while the record says this consumer runs this attempt.
  TaskReports(const Shared& s, std::unique_ptr<Channel>& channel, std::mutex* channel_lock, std::string queue,
              std::string task_id, std::int64_t attempt);
  /// Writes what `write(what, value)` is given (true when it was written): a child's reports,
  /// sent to its worker.
  using Writer = std::function<bool(std::string_view what, const std::string& value)>;
  explicit TaskReports(Writer write) : write_(std::move(write)) {}

  void set_result(std::string bytes);
  /// Writes `value` as the record's `what` ("progress" or "result") now; see Task.
  bool write(std::string_view what, const std::string& value);
  /// After the handler returned: no more writes; the result it ends with, if one was set.
  std::optional<std::string> close();

 private:
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
