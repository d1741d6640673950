// SPDX-License-Identifier: MIT
// The Inspector's state and the reads its calls share (inspector.cpp, doctor.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"
#include "keys.hpp"
#include "reply.hpp"
#include "scripts.hpp"
#include "streamq/inspector.hpp"

namespace streamq {

struct Inspector::Impl {
  explicit Impl(InspectorOptions o);

  /// The connection, connected (after the backoff delay if the last attempt failed).
  detail::Connection& connected();
  detail::Reply run(const detail::Argv& argv);
  std::int64_t server_ms();

  /// TaskInfo of each entry of an XRANGE reply.
  static std::vector<TaskInfo> entries(detail::ReplyView list, TaskState state, Priority level,
                                       const std::string& key);
  /// The group's last-delivered id on `stream`; empty when it has no such group (or no stream).
  std::string last_delivered(const std::string& stream);
  /// Marks the tasks the group holds as pending, with their consumer, idle time and deliveries.
  void add_pending_details(std::vector<TaskInfo>& tasks);

  TaskPage stream_page(const detail::QueueKeys& keys, const TaskQuery& q);
  TaskPage delayed_tasks(const detail::QueueKeys& keys, const TaskQuery& q);
  TaskPage dead_tasks(const detail::QueueKeys& keys, const TaskQuery& q);

  /// A member of the delayed set, with its bytes (what ZREM and run_delayed take) and score text.
  struct Delayed {
    std::string member;
    std::string score;
    TaskInfo info;
  };
  /// The `count` members after `after` (due time `score`); the first ones when `after` is empty.
  std::vector<Delayed> delayed_page(const detail::QueueKeys& keys, std::string_view score,
                                    std::string_view after, std::size_t count);
  std::optional<Delayed> find_delayed(const detail::QueueKeys& keys, std::string_view task_id);
  /// A task by entry id or task_id: in the level streams and the dead-letter stream
  /// (find_in_streams), then by task_id in the delayed set.
  std::optional<TaskInfo> find(const detail::QueueKeys& keys, const std::string& id);
  std::optional<TaskInfo> find_in_streams(const detail::QueueKeys& keys, const std::string& id);

  /// Calls act(ids, result) for each batch of the dead letters `filter` selects, reporting
  /// progress between batches.
  template <typename Act>
  ActionResult each_dead(const detail::QueueKeys& keys, const DeadLetterFilter& filter,
                         const ProgressCallback& progress, Act act);

  InspectorOptions options;
  detail::Connection conn;
  detail::ScriptRunner scripts;
};

}  // namespace streamq
