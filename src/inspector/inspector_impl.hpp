// SPDX-License-Identifier: MIT
// The Inspector's state and the reads its calls share (the files of src/inspector).
#pragma once

#include <mutex>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis/connection.hpp"
#include "redis/reply.hpp"
#include "redis/scripts.hpp"
#include "streamq/inspector.hpp"
#include "wire/keys.hpp"

namespace streamq {

struct Inspector::Impl {
  explicit Impl(InspectorOptions o);

  /// Held by every public call: they take turns on the connection (recursive: a call may make
  /// another).
  std::recursive_mutex calls;

  /// The connection, connected (after the backoff delay if the last attempt failed).
  detail::Connection& connected();
  detail::Reply run(const detail::Argv& argv);
  std::int64_t server_ms();

  /// The streams `queue` stands for: itself, or, when partition 0 has a key, its partitions 0
  /// to the highest whose keys exist (and `queue` after them when its keys exist too). See
  /// Inspector's "Partitioned queues".
  std::vector<std::string> parts(const std::string& queue);
  /// Where an id given to a call on `parts` is: `<part>/<id>` names one of them (`part` is set);
  /// anything else may be in any (`part` empty, `id` as given).
  struct Target {
    std::string part;
    std::string id;
  };
  static Target target(const std::vector<std::string>& parts, const std::string& id);
  /// The parts in which entry `id` is in the dead-letter stream (`dead`) or in a level stream.
  std::vector<std::string> parts_with_entry(const std::vector<std::string>& parts, const std::string& id,
                                            bool dead);
  /// ConfigError naming the parts when an unqualified entry id is in more than one of them.
  static void check_unambiguous(const std::string& id, const std::vector<std::string>& found);

  /// One queue of one stream: Inspector::tasks, ::replay, ::delete_dead, ::purge_dead,
  /// ::run_now and ::cancel on it.
  TaskPage page(const detail::QueueKeys& keys, const TaskQuery& q);
  ActionResult replay_one(const detail::QueueKeys& keys, const ReplayOptions& o);
  ActionResult delete_one(const detail::QueueKeys& keys, const DeadLetterFilter& filter,
                          const ProgressCallback& progress);
  std::int64_t purge_one(const detail::QueueKeys& keys);
  /// Deletes these dead letters and the records of their tracked tasks (forget.lua); how many
  /// were deleted. `drop_empty`: the dead-letter stream's key goes too when it is left empty.
  std::int64_t forget(const detail::QueueKeys& keys, const std::vector<std::string>& ids, bool drop_empty);
  std::optional<std::string> run_now_one(const detail::QueueKeys& keys, const std::string& task_id);
  CancelOutcome cancel_one(const detail::QueueKeys& keys, const std::string& id,
                           const std::vector<std::string>& parts);
  /// cancel_one in each of `parts` (the queue's) until one has `id` (or the one `part` names).
  CancelOutcome cancel_in(const std::vector<std::string>& parts, const std::string& part,
                          const std::string& id);
  /// replay_one or delete_one (`act`) on every part of `queue`, dead-letter ids sent to the part
  /// that has them, results and progress summed.
  template <typename Act>
  ActionResult on_dead_of_parts(const std::string& queue, const DeadLetterFilter& filter,
                                const ProgressCallback& progress, Act act);

  /// `command <pause flag> [arg]` for each part of `queue`, pipelined; the replies (checked).
  std::vector<detail::Reply> on_pause_flags(const std::string& queue, std::string_view command,
                                            std::string_view arg);
  /// Inspector::doctor() of one server (`node`) for the queue of one stream `queue`.
  std::vector<Finding> doctor_of(detail::Connection& node, const std::string& queue,
                                 const std::string& user_to_check);
  /// queues(): each partitioned queue's partitions as one QueueInfo.
  static std::vector<QueueInfo> group_partitions(std::vector<QueueInfo> found);

  /// TaskInfo of each entry of an XRANGE reply.
  static std::vector<TaskInfo> entries(detail::ReplyView list, TaskState state, Priority level,
                                       const std::string& key);
  /// The group's last-delivered id on `stream`; empty when it has no such group (or no stream).
  std::string last_delivered(const std::string& stream);
  /// Marks the tasks the group holds as pending, with their consumer, idle time and deliveries.
  void add_pending_details(std::vector<TaskInfo>& tasks);
  /// A pending task's holder, from its name lock (TaskInfo::holder); `queue` is the queue's first
  /// partition's stream, where consumers hold their names.
  void add_holder(const std::string& queue, TaskInfo& t);

  TaskPage stream_page(const detail::QueueKeys& keys, const TaskQuery& q);
  TaskPage delayed_tasks(const detail::QueueKeys& keys, const TaskQuery& q);
  TaskPage dead_tasks(const detail::QueueKeys& keys, const TaskQuery& q);
  TaskPage backlog_tasks(const detail::QueueKeys& keys, const TaskQuery& q);

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

  /// A task waiting in a tenant's backlog (TaskState::backlog), with its element's bytes (what
  /// the LREM of a cancel takes; empty unless asked for).
  struct Backlogged {
    std::string element;
    TaskInfo info;
  };
  /// Where a page of the backlogs starts (inspect_backlog.lua): in the ready (1) or waiting (2)
  /// set, at the tenant that had `score` there, at its `level` (1 high to 3 low; 4: past it),
  /// at `index` in that level's list.
  struct BacklogAt {
    int set = 1;
    std::string score;
    std::string tenant;
    int level = 1;
    std::int64_t index = 0;
  };
  struct BacklogPage {
    std::vector<Backlogged> tasks;
    std::optional<BacklogAt> next;  ///< unset: this was the last page
  };
  /// Up to `count` tasks of the backlogs of levels `first_level` to `last_level` (1 to 3) from
  /// `at` (unset: the first), looking at `tenants` tenants at most; `bytes`: with each element.
  BacklogPage backlog_page(const detail::QueueKeys& keys, const std::optional<BacklogAt>& at, int first_level,
                           int last_level, std::size_t count, std::size_t tenants, bool bytes);
  /// The backlog's task whose task_id is `task_id`, paging through every backlog.
  std::optional<Backlogged> find_backlog(const detail::QueueKeys& keys, std::string_view task_id);
  /// A task by entry id or task_id: in the level streams and the dead-letter stream
  /// (find_in_streams), then by task_id in the delayed set and in the tenants' backlogs.
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
