// SPDX-License-Identifier: MIT
// streamq tasks: a queue's tasks in one state, a page at a time (or every page with --all); the
// same listing serves dlq list and delayed list.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

void print_tasks(const Context& g, const std::vector<TaskInfo>& tasks, const std::string& next_cursor) {
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const TaskInfo& t : tasks) arr.push_back(nlohmann::json::parse(t.to_json()));
    print_json({{"tasks", arr}, {"next_cursor", next_cursor}});
    return;
  }
  Table t({"STATE", "LEVEL", "ID", "TASK_ID", "TYPE", "DETAIL", "PAYLOAD"});
  for (const TaskInfo& task : tasks) {
    std::string detail;
    switch (task.state) {
      case TaskState::pending:
        // (The consumer last: a long name is what the cell's width cuts.)
        detail = std::to_string(task.deliveries) + (task.deliveries == 1 ? " delivery" : " deliveries") +
                 ", idle " + ms_text(task.idle_ms) + ", " + task.consumer;
        break;
      case TaskState::delayed: detail = "due " + utc_text(task.due_ms); break;
      case TaskState::dead:
        detail = std::string(task.field("reason")) + ": " + std::string(task.field("error"));
        break;
      case TaskState::queued: detail = "retry " + std::string(task.field("retry_count")); break;
      case TaskState::backlog: detail = "tenant " + std::string(task.field("streamq_tenant")); break;
    }
    // In a partitioned queue an id is written with its partition, as the commands that act take it.
    const std::string id = task.partition.empty() ? task.id : task.partition + "/" + task.id;
    t.add({std::string(to_string(task.state)), std::string(to_string(task.level)), cell(id),
           cell(task.task_id(), 36), cell(task.task_type(), 24), cell(detail, 60), cell(task.payload(), 40)});
  }
  std::cout << t.str();
  if (!next_cursor.empty()) std::cerr << "more: --cursor '" << next_cursor << "'\n";
}

int list(const Context& g, const std::string& queue, TaskQuery q, bool all) {
  Inspector in(g.inspector());
  if (!all) {
    const TaskPage page = in.tasks(queue, q);
    print_tasks(g, page.tasks, page.next_cursor);
    return ok;
  }
  // Every page, printed as it comes: memory stays at one page. JSON: one task per line.
  for (;;) {
    const TaskPage page = in.tasks(queue, q);
    if (g.json()) {
      for (const TaskInfo& t : page.tasks) std::cout << t.to_json() << "\n";
    } else {
      print_tasks(g, page.tasks, "");
    }
    if (page.next_cursor.empty() || interrupted.load()) return interrupted.load() ? aborted : ok;
    q.cursor = page.next_cursor;
  }
}

struct ListArgs {
  std::string queue, state = "queued", level, cursor;
  std::size_t count = 50;
  bool all = false;

  TaskQuery query() const {
    TaskQuery q{.state = *parse_task_state(state), .level = std::nullopt, .cursor = cursor, .count = count};
    if (!level.empty()) q.level = parse_priority(level);
    return q;
  }
};

}  // namespace

void add_tasks(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<ListArgs>();
  auto* sub =
      add_queue_command(app, "tasks", "list tasks of a queue in one state, a page at a time", a->queue);
  sub->add_option("--state", a->state,
                  "queued, pending, delayed, dead or backlog (waiting in a tenant's backlog)")
      ->check(CLI::IsMember({"queued", "pending", "delayed", "dead", "backlog"}))
      ->capture_default_str();
  sub->add_option("--level", a->level, "only this priority level (queued, pending, backlog)")
      ->check(CLI::IsMember({"high", "normal", "low"}));
  add_page(sub, a->count, a->cursor, "tasks per page");
  sub->add_flag("--all", a->all, "every page, printed as they come");
  on_run(sub, ctx, [&ctx, a] { return list(ctx, a->queue, a->query(), a->all); });
}

void add_state_list(CLI::App& parent, const char* name, const char* description, TaskState state,
                    Context& ctx) {
  auto a = std::make_shared<ListArgs>();
  a->state = to_string(state);
  auto* sub = add_queue_command(parent, name, description, a->queue);
  add_page(sub, a->count, a->cursor, "per page");
  on_run(sub, ctx, [&ctx, a] { return list(ctx, a->queue, a->query(), false); });
}

}  // namespace streamq::cli
