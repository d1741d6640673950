// SPDX-License-Identifier: MIT
// The streamq command: an operator's face on streamq::Inspector (and a Producer for enqueue).
// Every subcommand talks to Redis through the library; see `streamq --help` and docs/cli-and-dashboard.md.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <streamq/streamq.hpp>

#include "output.hpp"
#include "serve.hpp"

namespace streamq::cli {
namespace {

struct Global {
  std::string url = "redis://127.0.0.1:6379";
  std::string group = "workers";
  std::string format = "table";
  bool json() const { return format == "json"; }
  InspectorOptions inspector() const { return {.connection = {.url = url}, .group = group}; }
};

std::string level_list(const std::vector<Priority>& levels) {
  std::string out;
  for (Priority p : levels) out += (out.empty() ? "" : ",") + std::string(to_string(p));
  return out.empty() ? "-" : out;
}

int cmd_queues(const Global& g) {
  Inspector in(g.inspector());
  const auto queues = in.queues();
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const QueueInfo& q : queues) {
      std::vector<std::string> levels;
      for (Priority p : q.levels) levels.emplace_back(to_string(p));
      arr.push_back({{"name", q.name},
                     {"partitions", q.partitions},
                     {"levels", levels},
                     {"length", q.length},
                     {"dlq", q.dlq},
                     {"dlq_length", q.dlq_length},
                     {"delayed", q.delayed},
                     {"delayed_count", q.delayed_count},
                     {"paused", q.paused}});
    }
    std::cout << arr.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return ok;
  }
  Table t({"QUEUE", "PARTITIONS", "LEVELS", "LENGTH", "DELAYED", "DEAD", "PAUSED"});
  for (const QueueInfo& q : queues) {
    t.add({cell(q.name), q.partitions.empty() ? "-" : std::to_string(q.partitions.size()),
           level_list(q.levels), std::to_string(q.length), std::to_string(q.delayed_count),
           std::to_string(q.dlq_length), q.paused ? "yes" : "no"});
  }
  std::cout << t.str();
  return ok;
}

void print_stats(const Global& g, const std::vector<QueueStats>& all) {
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const QueueStats& s : all) arr.push_back(nlohmann::json::parse(s.to_json()));
    std::cout << arr.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  Table t({"QUEUE", "LENGTH", "PENDING", "DELAYED", "DEAD", "CONSUMERS", "OLDEST", "OLDEST PENDING IDLE"});
  for (const QueueStats& s : all) {
    std::size_t consumers = 0;
    std::optional<std::int64_t> idle;
    for (const GroupInfo& gi : s.groups) {
      consumers += gi.consumers.size();
      if (gi.oldest_pending_idle_ms) idle = std::max(idle.value_or(0), *gi.oldest_pending_idle_ms);
    }
    std::optional<std::int64_t> oldest;
    for (const LevelStats& l : s.levels) {
      if (l.oldest_entry_age_ms) oldest = std::max(oldest.value_or(0), *l.oldest_entry_age_ms);
    }
    t.add({cell(s.stream), std::to_string(s.total_length), std::to_string(s.total_pending),
           std::to_string(s.delayed), std::to_string(s.dlq_length), std::to_string(consumers),
           oldest ? ms_text(*oldest) : "-", idle ? ms_text(*idle) : "-"});
  }
  std::cout << t.str();
}

int cmd_stats(const Global& g, const std::vector<std::string>& names, double watch) {
  Inspector in(g.inspector());
  for (;;) {
    std::vector<std::string> queues = names;
    if (queues.empty()) {
      for (const QueueInfo& q : in.queues()) queues.push_back(q.name);
    }
    std::vector<QueueStats> all;
    for (const std::string& q : queues) all.push_back(in.stats(q));
    if (watch > 0 && isatty(STDOUT_FILENO)) std::cout << "\x1b[H\x1b[2J";  // clear the screen
    print_stats(g, all);
    if (watch <= 0) return ok;
    std::cout << std::flush;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(watch);
    while (std::chrono::steady_clock::now() < until) {
      if (interrupted.load()) return ok;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a terminal loop; no event to await
    }
  }
}

void print_tasks(const Global& g, const std::vector<TaskInfo>& tasks, const std::string& next_cursor) {
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const TaskInfo& t : tasks) arr.push_back(nlohmann::json::parse(t.to_json()));
    nlohmann::json doc = {{"tasks", arr}, {"next_cursor", next_cursor}};
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  Table t({"STATE", "LEVEL", "ID", "TASK_ID", "TYPE", "DETAIL", "PAYLOAD"});
  for (const TaskInfo& task : tasks) {
    std::string detail;
    switch (task.state) {
      case TaskState::pending:
        detail = task.consumer + ", idle " + ms_text(task.idle_ms) + ", " + std::to_string(task.deliveries) +
                 " deliveries";
        break;
      case TaskState::delayed: detail = "due " + std::to_string(task.due_ms); break;
      case TaskState::dead:
        detail = std::string(task.field("reason")) + ": " + std::string(task.field("error"));
        break;
      case TaskState::queued: detail = "retry " + std::string(task.field("retry_count")); break;
    }
    // In a partitioned queue an id is written with its partition, as the commands that act take it.
    const std::string id = task.partition.empty() ? task.id : task.partition + "/" + task.id;
    t.add({std::string(to_string(task.state)), std::string(to_string(task.level)), cell(id),
           cell(task.task_id(), 36), cell(task.task_type(), 24), cell(detail, 40), cell(task.payload(), 40)});
  }
  std::cout << t.str();
  if (!next_cursor.empty()) std::cerr << "more: --cursor '" << next_cursor << "'\n";
}

int cmd_tasks(const Global& g, const std::string& queue, TaskQuery q, bool all) {
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

/// A record's rows: state, attempts, times, worker, error, result, progress.
void add_record_rows(Table& table, const TaskRecord& r) {
  const auto time = [](const std::optional<std::chrono::system_clock::time_point>& t) {
    return t ? std::to_string(
                   std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count())
             : std::string("-");
  };
  table.add({"record.state", std::string(to_string(r.state))});
  table.add({"record.attempts", std::to_string(r.attempts)});
  table.add({"record.enqueued_at_ms", time(r.enqueued_at)});
  table.add({"record.started_at_ms", time(r.started_at)});
  table.add({"record.finished_at_ms", time(r.finished_at)});
  if (r.due_at) table.add({"record.due_at_ms", time(r.due_at)});
  if (!r.worker.empty()) table.add({"record.worker", cell(r.worker, 200)});
  if (!r.error.empty()) table.add({"record.error", cell(r.error, 200)});
  if (!r.reason.empty()) table.add({"record.reason", cell(r.reason, 200)});
  if (r.progress) table.add({"record.progress", cell(*r.progress, 200)});
  if (r.result) table.add({"record.result", cell(*r.result, 200)});
}

int cmd_task(const Global& g, const std::string& queue, const std::string& id) {
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
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
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
  }
  if (t->state == TaskState::delayed) table.add({"due_ms", std::to_string(t->due_ms)});
  for (const auto& [k, v] : t->fields) table.add({cell(k, 40), cell(v, 200)});
  if (record) add_record_rows(table, *record);
  std::cout << table.str();
  return ok;
}

/// streamq events: the queue's events from `from` ("$": new ones), followed until Ctrl-C, or
/// until `count` were printed (> 0).
int cmd_events(const Global& g, const std::string& queue, const std::string& from, long count) {
  Inspector in(g.inspector());
  std::string after = from;
  long printed = 0;
  while (!interrupted.load()) {
    const Inspector::QueueEvents batch = in.events(queue, after, 100, std::chrono::milliseconds(500));
    for (const QueueEvent& e : batch.events) {
      if (g.json()) {
        nlohmann::ordered_json j = {
            {"id", e.id},
            {"event", e.event},
            {"task_id", e.task_id},
            {"at_ms",
             std::chrono::duration_cast<std::chrono::milliseconds>(e.at.time_since_epoch()).count()}};
        for (const auto& [k, v] : e.fields) j[k] = v;
        std::cout << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << std::endl;
      } else {
        std::string line = e.id + " " + e.event + " " + cell(e.task_id, 64);
        for (const auto& [k, v] : e.fields) line += " " + cell(k, 40) + "=" + cell(v, 80);
        std::cout << line << std::endl;
      }
      if (count > 0 && ++printed >= count) return ok;
    }
    after = batch.next;
  }
  return aborted;
}

int report_action(const Global& g, const char* verb, const ActionResult& r) {
  if (g.json()) {
    std::cout << nlohmann::json{{verb, r.done}, {"skipped", r.skipped}, {"finished", r.finished}}.dump()
              << "\n";
  } else {
    std::cout << verb << " " << r.done
              << (r.skipped ? ", skipped " + std::to_string(r.skipped) : std::string())
              << (r.finished ? "" : " (interrupted: the rest is untouched)") << "\n";
  }
  return r.finished ? ok : aborted;
}

ProgressCallback progress_to(ProgressLine& line) {
  return [&line](const Progress& p) {
    line.update(p.done, p.total);
    return !interrupted.load();
  };
}

int cmd_enqueue(const Global& g, const std::string& queue, const std::string& type,
                const std::string& payload, bool from_stdin, const EnqueueOptions& eo, std::int64_t max_len,
                int partitions) {
  Producer producer(
      {.connection = {.url = g.url}, .stream = queue, .max_len = max_len, .partitions = partitions});
  if (!from_stdin) {
    const std::string id = producer.enqueue(type, payload.empty() ? std::string("{}") : payload, eo);
    if (g.json()) {
      std::cout << nlohmann::json{{"task_id", id}}.dump() << "\n";
    } else {
      std::cout << id << "\n";
    }
    return ok;
  }
  // JSON lines: {"type": ..., "payload": ..., "task_id"?, "delay_ms"?, "priority"?}; sent in
  // batches of 500, each one pipelined and checked whole before the next is read.
  ProgressLine line("enqueued");
  std::vector<TaskSpec> batch;
  std::int64_t done = 0, line_no = 0;
  const auto flush = [&] {
    if (batch.empty()) return;
    try {
      producer.enqueue_batch(batch);
    } catch (const EnqueueRefusedError& e) {
      // The tasks of the batch before the refused one were written: count them in what is said.
      done += static_cast<std::int64_t>(e.accepted());
      line.finish();
      throw Error(std::string(e.what()) + "; " + std::to_string(done) +
                  " tasks were enqueued, from the first line on, and none after the refused one was written" +
                  (dynamic_cast<const QueueFullError*>(&e) ? " (a larger --max-len lets more in)" : ""));
    }
    done += static_cast<std::int64_t>(batch.size());
    batch.clear();
    line.update(done, 0);
  };
  std::string text;
  while (!interrupted.load() && std::getline(std::cin, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    TaskSpec spec;
    try {
      const nlohmann::json j = nlohmann::json::parse(text);
      if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
        throw std::invalid_argument("an object with a string \"type\" is needed");
      }
      spec.task_type = j["type"].get<std::string>();
      spec.payload = j.contains("payload") ? j["payload"].dump() : std::string("{}");
      spec.options = eo;
      if (j.contains("task_id")) spec.options.task_id = j["task_id"].get<std::string>();
      if (j.contains("delay_ms"))
        spec.options.delay = std::chrono::milliseconds(j["delay_ms"].get<std::int64_t>());
      if (j.contains("priority")) {
        const auto p = parse_priority(j["priority"].get<std::string>());
        if (!p) throw std::invalid_argument("priority must be high, normal or low");
        spec.options.priority = *p;
      }
    } catch (const std::exception& e) {
      flush();
      line.finish();
      std::cerr << "streamq: stdin line " << line_no << ": " << e.what() << "; " << done
                << " tasks were enqueued before it, none after\n";
      return usage;
    }
    batch.push_back(std::move(spec));
    if (batch.size() == 500) flush();
  }
  if (!interrupted.load()) flush();
  line.finish();
  if (g.json()) {
    std::cout << nlohmann::json{{"enqueued", done}, {"finished", !interrupted.load()}}.dump() << "\n";
  } else {
    std::cout << "enqueued " << done
              << (interrupted.load() ? " (interrupted: lines after these were not sent)" : "") << "\n";
  }
  return interrupted.load() ? aborted : ok;
}

int cmd_consumers(const Global& g, const std::string& queue) {
  Inspector in(g.inspector());
  const QueueStats s = in.stats(queue);
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::parse(s.to_json())["groups"];
    std::cout << arr.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return ok;
  }
  Table t({"GROUP", "CONSUMER", "PENDING", "IDLE"});
  for (const GroupInfo& gi : s.groups) {
    for (const ConsumerInfo& c : gi.consumers)
      t.add({cell(gi.name), cell(c.name), std::to_string(c.pending), ms_text(c.idle_ms)});
  }
  std::cout << t.str();
  return ok;
}

int cmd_doctor(const Global& g, const std::string& queue, const std::string& user) {
  Inspector in(g.inspector());
  const auto findings = in.doctor(queue, user);
  Finding::Severity worst = Finding::Severity::ok;
  for (const Finding& f : findings) worst = std::max(worst, f.severity);
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const Finding& f : findings) {
      arr.push_back({{"severity", to_string(f.severity)}, {"topic", f.topic}, {"message", f.message}});
    }
    std::cout << arr.dump(2) << "\n";
  } else {
    for (const Finding& f : findings) {
      std::cout << "[" << to_string(f.severity) << "] " << f.topic << ": " << f.message << "\n";
    }
    std::cout << (worst == Finding::Severity::danger
                      ? "streamq doctor: this server can lose tasks; fix the [danger] lines\n"
                      : "streamq doctor: nothing here loses tasks\n");
  }
  return worst == Finding::Severity::danger ? unsafe : ok;
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"streamq: inspect and operate streamq task queues on Redis"};
  app.require_subcommand(1);
  app.fallthrough();  // --url, --group and --format also after the subcommand
  Global g;
  app.add_option("--url", g.url,
                 "Redis URL (redis://[user[:password]@]host[:port][/db], "
                 "redis+sentinel://host:port[,host:port...]/master-name[/db], "
                 "redis+cluster://host:port[,host:port...] or unix:///path)")
      ->envname("STREAMQ_URL")
      ->capture_default_str();
  app.add_option("--group", g.group, "consumer group")->capture_default_str();
  app.add_option("--format", g.format, "output of listing commands")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();

  auto* queues = app.add_subcommand("queues", "list every queue on the server (SCAN, never KEYS)");

  std::vector<std::string> stats_names;
  double watch = 0;
  auto* stats = app.add_subcommand("stats", "queue health: length, pending, delayed, dead, consumers, ages");
  stats->add_option("queue", stats_names, "queues (default: every queue found)");
  stats->add_option("--watch", watch, "refresh every this many seconds until Ctrl-C")
      ->check(CLI::NonNegativeNumber);

  std::string queue, id, state_name = "queued", level_name, cursor;
  std::size_t count = 50;
  bool all_pages = false;
  auto* tasks = app.add_subcommand("tasks", "list tasks of a queue in one state, a page at a time");
  tasks->add_option("queue", queue, "the queue")->required();
  tasks->add_option("--state", state_name, "queued, pending, delayed or dead")
      ->check(CLI::IsMember({"queued", "pending", "delayed", "dead"}))
      ->capture_default_str();
  tasks->add_option("--level", level_name, "only this priority level (queued, pending)")
      ->check(CLI::IsMember({"high", "normal", "low"}));
  tasks->add_option("--count", count, "tasks per page")->check(CLI::Range(1, 10000))->capture_default_str();
  tasks->add_option("--cursor", cursor, "continue where the previous page ended");
  tasks->add_flag("--all", all_pages, "every page, printed as they come");

  auto* task =
      app.add_subcommand("task", "one task by entry id or task_id, with its record if it is tracked");
  task->add_option("queue", queue, "the queue")->required();
  task->add_option("id", id,
                   "entry id (<ms>-<seq>; <partition>/<ms>-<seq> in a partitioned queue) or task_id")
      ->required();

  DeadLetterFilter filter;
  std::string priority_name = "normal";
  bool yes = false;
  auto* dlq = app.add_subcommand("dlq", "dead letters: list, replay, delete, purge");
  dlq->require_subcommand(1);
  auto* dlq_list = dlq->add_subcommand("list", "list dead letters");
  dlq_list->add_option("queue", queue, "the queue")->required();
  dlq_list->add_option("--count", count, "per page")->check(CLI::Range(1, 10000))->capture_default_str();
  dlq_list->add_option("--cursor", cursor, "continue where the previous page ended");
  const auto add_filter = [&](CLI::App* sub) {
    sub->add_option("queue", queue, "the queue")->required();
    sub->add_option(
        "--id", filter.ids,
        "only these dead-letter entry ids (repeatable; <partition>/<ms>-<seq> in a partitioned queue)");
    sub->add_option("--type", filter.task_type, "only tasks of this type");
    sub->add_option("--reason", filter.reason, "only this reason (max_retries, permanent, no_handler, ...)");
    sub->add_flag("--yes,-y", yes, "do not ask for confirmation");
  };
  auto* dlq_replay =
      dlq->add_subcommand("replay", "put dead-lettered tasks back into the queue (fresh attempts)");
  add_filter(dlq_replay);
  dlq_replay->add_option("--priority", priority_name, "the level they go back to")
      ->check(CLI::IsMember({"high", "normal", "low"}))
      ->capture_default_str();
  auto* dlq_delete = dlq->add_subcommand("delete", "delete dead letters");
  add_filter(dlq_delete);
  auto* dlq_purge = dlq->add_subcommand("purge", "delete the whole dead-letter stream");
  dlq_purge->add_option("queue", queue, "the queue")->required();
  dlq_purge->add_flag("--yes,-y", yes, "do not ask for confirmation");

  auto* delayed = app.add_subcommand("delayed", "delayed tasks: list, run now");
  delayed->require_subcommand(1);
  auto* delayed_list = delayed->add_subcommand("list", "list delayed tasks in due order");
  delayed_list->add_option("queue", queue, "the queue")->required();
  delayed_list->add_option("--count", count, "per page")->check(CLI::Range(1, 10000))->capture_default_str();
  delayed_list->add_option("--cursor", cursor, "continue where the previous page ended");
  auto* delayed_run = delayed->add_subcommand("run", "move a delayed task to its queue now");
  delayed_run->add_option("queue", queue, "the queue")->required();
  delayed_run->add_option("task_id", id, "the task's id")->required();

  auto* cancel = app.add_subcommand(
      "cancel", "cancel a queued or delayed task, or ask the worker running one to stop it");
  cancel->add_option("queue", queue, "the queue")->required();
  cancel->add_option("id", id, "entry id (<partition>/<ms>-<seq> in a partitioned queue) or task_id")
      ->required();
  cancel->add_flag("--yes,-y", yes, "do not ask for confirmation");

  std::string type, payload;
  bool from_stdin = false;
  std::int64_t delay_ms = 0;
  std::int64_t retention_ms = -1;
  std::int64_t max_len = ProducerOptions{}.max_len;
  EnqueueOptions eo;
  auto* enqueue = app.add_subcommand("enqueue", "enqueue a task, or JSON lines from stdin with --stdin");
  enqueue->add_option("queue", queue, "the queue")->required();
  enqueue->add_option("type", type, "task type (not with --stdin)");
  enqueue->add_option("payload", payload, "JSON payload (default {})");
  enqueue->add_flag(
      "--stdin", from_stdin,
      "read JSON lines {\"type\":…, \"payload\":…, \"task_id\"?, \"delay_ms\"?, \"priority\"?}");
  enqueue->add_option("--task-id", eo.task_id, "task id (default: a new UUID)");
  enqueue->add_option("--delay-ms", delay_ms, "run no sooner than this many ms from now")
      ->check(CLI::NonNegativeNumber);
  enqueue
      ->add_option("--retention-ms", retention_ms,
                   "track the tasks: keep their records this many ms once done (a dead one's as long as "
                   "its dead letter); see `streamq task` and `streamq events`")
      ->check(CLI::NonNegativeNumber);
  enqueue->add_option("--max-len", max_len, "refuse tasks once the queue holds this many unfinished ones")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  enqueue->add_option("--priority", priority_name, "high, normal or low")
      ->check(CLI::IsMember({"high", "normal", "low"}));
  int partitions = 1;
  enqueue
      ->add_option("--partitions", partitions,
                   "the queue's partitions (its producers' ProducerOptions::partitions)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  enqueue->add_option("--partition-key", eo.partition_key, "tasks with one key go to one partition");

  std::string events_from = "$";
  long events_count = 0;
  auto* events = app.add_subcommand("events", "follow the events of the queue's tracked tasks (Ctrl-C ends)");
  events->add_option("queue", queue, "the queue")->required();
  events
      ->add_option("--from", events_from, "start after this event id (0: from the oldest kept; $: new ones)")
      ->capture_default_str();
  events->add_option("--count", events_count, "stop after this many events (0: follow until Ctrl-C)")
      ->check(CLI::NonNegativeNumber);

  auto* pause =
      app.add_subcommand("pause", "workers stop taking new tasks of the queue (running ones finish)");
  pause->add_option("queue", queue, "the queue")->required();
  auto* resume = app.add_subcommand("resume", "workers take the queue's tasks again");
  resume->add_option("queue", queue, "the queue")->required();

  auto* consumers = app.add_subcommand("consumers", "consumers of the queue's groups");
  consumers->add_option("queue", queue, "the queue")->required();

  std::string doctor_queue = "task_queue";
  auto* doctor = app.add_subcommand("doctor", "check that the server runs streamq without losing tasks");
  doctor->add_option("--queue", doctor_queue, "the queue whose ACL permissions to check")
      ->capture_default_str();
  std::string doctor_user;
  doctor->add_option("--user", doctor_user,
                     "the ACL user whose permissions to check for each role (default: the connection's own)");

  ServeOptions serve;
  auto* exporter = app.add_subcommand("exporter", "serve Prometheus metrics of every queue on /metrics");
  serve.listen = "127.0.0.1:9808";
  exporter->add_option("--listen", serve.listen, "host:port")->capture_default_str();

  DashboardOptions board;
  auto* dashboard = app.add_subcommand(
      "dashboard",
      "serve the web dashboard: queues, charts of the last hour, tasks, replay/delete/run/pause");
  dashboard->add_option("--listen", board.listen, "host:port (any but a loopback host needs a token)")
      ->capture_default_str();
  dashboard->add_option("--token", board.token,
                        "access token (16-256 characters), asked for on every request (other users see "
                        "it in ps: prefer --token-file)");
  dashboard->add_flag("--no-auth", board.no_auth,
                      "serve without a token (loopback only; the default is a random token printed once)");
  dashboard->add_option("--token-file", board.token_file, "file whose first line is the access token")
      ->check(CLI::ExistingFile);
  dashboard->add_option("--sample-interval", board.sample_interval, "seconds between the charts' samples")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? ok : usage;
  }
  install_interrupt_handler();
  try {
    if (*queues) return cmd_queues(g);
    if (*stats) return cmd_stats(g, stats_names, watch);
    if (*tasks) {
      TaskQuery q{
          .state = *parse_task_state(state_name), .level = std::nullopt, .cursor = cursor, .count = count};
      if (!level_name.empty()) q.level = parse_priority(level_name);
      return cmd_tasks(g, queue, q, all_pages);
    }
    if (*task) return cmd_task(g, queue, id);
    if (*events) return cmd_events(g, queue, events_from == "0" ? "0-0" : events_from, events_count);
    if (*dlq_list) {
      Inspector in(g.inspector());
      const TaskPage page = in.tasks(
          queue, {.state = TaskState::dead, .level = std::nullopt, .cursor = cursor, .count = count});
      print_tasks(g, page.tasks, page.next_cursor);
      return ok;
    }
    if (*dlq_replay || *dlq_delete) {
      const bool replay = dlq_replay->parsed();
      Inspector in(g.inspector());
      const std::int64_t total =
          filter.ids.empty() ? in.stats(queue).dlq_length : static_cast<std::int64_t>(filter.ids.size());
      const std::string what = std::string(replay ? "Replay" : "Delete") + " the dead letters of " + queue +
                               (filter.task_type.empty() ? "" : " of type " + filter.task_type) +
                               (filter.reason.empty() ? "" : " with reason " + filter.reason) + " (" +
                               (filter.ids.empty() ? "up to " : "") + std::to_string(total) + ")?";
      if (!yes && !confirm(what)) return aborted;
      ProgressLine line(replay ? "replayed" : "deleted");
      ActionResult r;
      if (replay) {
        r = in.replay(
            queue,
            {.filter = filter, .priority = *parse_priority(priority_name), .progress = progress_to(line)});
      } else {
        r = in.delete_dead(queue, filter, progress_to(line));
      }
      line.finish();
      return report_action(g, replay ? "replayed" : "deleted", r);
    }
    if (*dlq_purge) {
      Inspector in(g.inspector());
      if (!yes && !confirm("Delete all " + std::to_string(in.stats(queue).dlq_length) + " dead letters of " +
                           queue + "?"))
        return aborted;
      const std::int64_t n = in.purge_dead(queue);
      std::cout << (g.json() ? nlohmann::json{{"purged", n}}.dump() : "purged " + std::to_string(n)) << "\n";
      return ok;
    }
    if (*delayed_list) {
      Inspector in(g.inspector());
      const TaskPage page = in.tasks(
          queue, {.state = TaskState::delayed, .level = std::nullopt, .cursor = cursor, .count = count});
      print_tasks(g, page.tasks, page.next_cursor);
      return ok;
    }
    if (*delayed_run) {
      Inspector in(g.inspector());
      const auto entry = in.run_now(queue, id);
      if (!entry) {
        std::cerr << "streamq: no delayed task " << id << " in " << queue << " (it may have become due)\n";
        return not_found;
      }
      std::cout << (g.json() ? nlohmann::json{{"entry_id", *entry}}.dump() : *entry) << "\n";
      return ok;
    }
    if (*cancel) {
      if (!yes && !confirm("Cancel task " + id + " of " + queue + "?")) return aborted;
      Inspector in(g.inspector());
      switch (in.cancel(queue, id)) {
        case CancelOutcome::cancelled: std::cout << "cancelled " << id << "\n"; return ok;
        case CancelOutcome::running:
          std::cout << "cancelling " << id
                    << ": a consumer holds it; its worker asks the handler to stop within a heartbeat, "
                       "and it ends cancelled\n";
          return ok;
        case CancelOutcome::missing:
          std::cerr << "streamq: no queued or delayed task " << id << "\n";
          return not_found;
      }
    }
    if (*enqueue) {
      if (from_stdin != type.empty()) {
        std::cerr << "streamq enqueue: give a task type, or --stdin, not both\n";
        return usage;
      }
      eo.delay = std::chrono::milliseconds(delay_ms);
      if (retention_ms >= 0) eo.retention = Retention{.done = std::chrono::milliseconds(retention_ms)};
      eo.priority = *parse_priority(priority_name);
      return cmd_enqueue(g, queue, type, payload, from_stdin, eo, max_len, partitions);
    }
    if (*pause || *resume) {
      Inspector in(g.inspector());
      if (*pause) {
        in.pause(queue);
      } else {
        in.resume(queue);
      }
      std::cout << queue << (*pause ? " paused" : " resumed") << "\n";
      return ok;
    }
    if (*consumers) return cmd_consumers(g, queue);
    if (*doctor) return cmd_doctor(g, doctor_queue, doctor_user);
    if (*exporter) return serve_exporter(g.inspector(), serve);
    if (*dashboard) return serve_dashboard(g.inspector(), board);
  } catch (const ConfigError& e) {
    std::cerr << "streamq: " << e.what() << "\n";
    return usage;
  } catch (const Error& e) {
    std::cerr << "streamq: " << e.what() << "\n";
    return failed;
  } catch (const std::exception& e) {
    std::cerr << "streamq: " << e.what() << "\n";
    return failed;
  }
  return usage;
}

}  // namespace streamq::cli

int main(int argc, char** argv) { return streamq::cli::run(argc, argv); }
