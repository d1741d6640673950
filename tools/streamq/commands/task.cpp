// SPDX-License-Identifier: MIT
// streamq task: one task by entry id or task_id, with its record if it is tracked.
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

/// A record's rows: state, attempts, times, worker, error, result, progress.
void add_record_rows(Table& table, const TaskRecord& r) {
  // (UTC, as the task's created_at field: one form of time in the table.)
  const auto time = [](const std::optional<std::chrono::system_clock::time_point>& t) {
    return t ? utc_text(std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count())
             : std::string("-");
  };
  table.add({"record.state", std::string(to_string(r.state))});
  table.add({"record.attempts", std::to_string(r.attempts)});
  table.add({"record.enqueued_at", time(r.enqueued_at)});
  table.add({"record.started_at", time(r.started_at)});
  table.add({"record.finished_at", time(r.finished_at)});
  if (r.due_at) table.add({"record.due_at", time(r.due_at)});
  if (!r.worker.empty()) table.add({"record.worker", cell(r.worker, 200)});
  if (!r.error.empty()) table.add({"record.error", cell(r.error, 200)});
  if (!r.reason.empty()) table.add({"record.reason", cell(r.reason, 200)});
  if (r.progress) table.add({"record.progress", cell(*r.progress, 200)});
  if (r.result) table.add({"record.result", cell(*r.result, 200)});
}

int task(const Context& g, const std::string& queue, const std::string& id) {
  Inspector in(g.inspector());
  const auto t = in.task(queue, id);
  // A tracked task's record (also once it finished and left every stream: by its task id).
  const auto record = t ? t->record : in.record(queue, id);
  if (!t && !record) {
    std::cerr << "streamq: no task " << id << " in " << queue << "\n";
    return not_found;
  }
  if (g.json()) {
    nlohmann::json doc = t ? nlohmann::json::parse(t->to_json()) : nlohmann::json::object();
    if (!t) doc["record"] = nlohmann::json::parse(record->to_json());
    print_json(doc);
    return ok;
  }
  Table table({"FIELD", "VALUE"});
  if (!t) {
    table.add({"state", "finished (in no stream of the queue)"});
    add_record_rows(table, *record);
    std::cout << table.str();
    return ok;
  }
  table.add({"state", std::string(to_string(t->state))});
  table.add({"level", std::string(to_string(t->level))});
  table.add({"key", cell(t->key, 200)});
  table.add({"id", cell(t->id, 200)});
  if (t->state == TaskState::pending) {
    table.add({"consumer", cell(t->consumer, 200)});
    table.add({"idle", ms_text(t->idle_ms)});
    table.add({"deliveries", std::to_string(t->deliveries)});
    if (!t->holder) {
      table.add({"holder", "gone (no name lock): the next reclaim pass of any consumer takes it"});
    } else {
      const TaskInfo::Holder& h = *t->holder;
      if (h.gone) {
        table.add({"holder",
                   "gone: its connection is closed (the process died or was killed; its record may "
                   "still say running)"});
      } else if (h.renewing) {
        table.add({"holder", "renewing its lease"});
      } else {
        table.add({"holder", "silent for " + ms_text(h.silent_ms) +
                                 ": frozen or cut off (its record may still say running)"});
      }
      const std::string when =
          h.reclaim_in_ms == 0 ? std::string("now, at the next reclaim pass") : ms_text(h.reclaim_in_ms);
      table.add({"reclaim in", h.gone ? when + " (a worker restarted under its name takes it back at once)"
                               : h.reclaim_in_ms == 0 ? when
                                                      : when + " unless the holder renews its lease"});
    }
  }
  if (t->state == TaskState::delayed) table.add({"due_at", utc_text(t->due_ms)});
  for (const auto& [k, v] : t->fields) table.add({cell(k, 40), cell(v, 200)});
  if (record) add_record_rows(table, *record);
  std::cout << table.str();
  return ok;
}

struct TaskArgs {
  std::string queue, id;
};

}  // namespace

void add_task(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<TaskArgs>();
  auto* sub = add_queue_command(
      app, "task", "one task by entry id or task_id, with its record if it is tracked", a->queue);
  sub->add_option("id", a->id,
                  "entry id (<ms>-<seq>; <partition>/<ms>-<seq> in a partitioned queue) or task_id")
      ->required();
  on_run(sub, ctx, [&ctx, a] { return task(ctx, a->queue, a->id); });
}

}  // namespace streamq::cli
