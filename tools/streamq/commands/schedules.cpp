// SPDX-License-Identifier: MIT
// streamq schedules: a queue's stored schedules (streamq::Schedules, schedules as data): list
// them with their next ticks and last tick, show one, pause (with a note), resume, remove, and
// add or change one (upsert). Running Schedulers of the queue follow a change within a second.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <streamq/scheduler.hpp>
#include <streamq/schedules.hpp>

#include "commands/commands.hpp"
#include "iso_time.hpp"
#include "output.hpp"
#include "schedule_queue.hpp"

namespace streamq::cli {
namespace {

using TimePoint = std::chrono::system_clock::time_point;

/// The queue a subcommand acts on; `partitions` unset: found as `streamq queues` finds them.
struct QueueArgs {
  std::string queue;
  std::optional<int> partitions;
};

void add_queue_flags(CLI::App* sub, QueueArgs& a) {
  sub->add_option("--partitions", a.partitions,
                  "the queue's partitions (its Schedulers' QueueOptions::partitions; default: as "
                  "`streamq queues` finds them)")
      ->check(CLI::Range(1, 1024));
}

Schedules open(const Context& g, const QueueArgs& a) {
  int partitions = 1;
  if (a.partitions) {
    partitions = *a.partitions;
  } else {
    Inspector in(g.inspector());
    partitions = find_partitions(in, a.queue);
  }
  return queue_schedules({.url = g.url}, a.queue, partitions);
}

/// ScheduleInfo::to_json() indented, its keys in their order (print_json sorts them).
void print_ordered(const nlohmann::ordered_json& doc) {
  std::cout << doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

std::string time_text(TimePoint t) { return utc_text(unix_ms(t)); }

std::string state_text(const ScheduleInfo& s) {
  if (!s.paused) return "running";
  return s.note.empty() ? "paused" : "paused: " + s.note;
}

std::string next_text(const ScheduleInfo& s) {
  if (s.next_ticks.empty()) return "-";
  std::string out;
  for (const TimePoint t : s.next_ticks) out += (out.empty() ? "" : ", ") + time_text(t);
  return out;
}

/// `<tick> <outcome> <task id>`, or - before the first tick.
std::string last_text(const ScheduleInfo& s) {
  if (!s.last_tick) return "-";
  std::string out = time_text(*s.last_tick) + " " + s.last_outcome;
  if (!s.last_task_id.empty()) out += " " + s.last_task_id;
  return out;
}

int not_found_message(const std::string& name, const std::string& queue) {
  std::cerr << "streamq: no schedule " << name << " in " << queue << "\n";
  return not_found;
}

int list(const Context& g, const QueueArgs& a) {
  Schedules schedules = open(g, a);
  const std::vector<ScheduleInfo> all = schedules.list(3);
  if (g.json()) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const ScheduleInfo& s : all) arr.push_back(nlohmann::ordered_json::parse(s.to_json()));
    print_ordered(arr);
    return ok;
  }
  Table table({"NAME", "SCHEDULE", "TYPE", "STATE", "SOURCE", "NEXT TICKS", "LAST TICK"});
  for (const ScheduleInfo& s : all) {
    table.add({cell(s.name, 40), cell(s.schedule, 40), cell(s.task_type, 40), cell(state_text(s), 60),
               s.from_code ? "code" : "api", cell(next_text(s), 100), cell(last_text(s), 120)});
  }
  std::cout << table.str();
  return ok;
}

template <class T>
std::string optional_text(const std::optional<T>& v) {
  return v ? std::to_string(*v) : std::string("-");
}

int show(const Context& g, const QueueArgs& a, const std::string& name, std::size_t next) {
  Schedules schedules = open(g, a);
  const std::optional<ScheduleInfo> s = schedules.get(name, next);
  if (!s) return not_found_message(name, a.queue);
  if (g.json()) {
    print_ordered(nlohmann::ordered_json::parse(s->to_json()));
    return ok;
  }
  const ScheduledTaskOptions& o = s->options;
  Table table({"FIELD", "VALUE"});
  table.add({"name", cell(s->name, 200)});
  table.add({"schedule", cell(s->schedule, 200)});
  table.add({"task_type", cell(s->task_type, 200)});
  table.add({"payload", cell(s->payload, 200)});
  table.add({"state", cell(state_text(*s), 200)});
  table.add(
      {"source", s->from_code ? "code (a Scheduler's add())" : "api (Schedules::upsert, streamq schedules)"});
  table.add({"version", std::to_string(s->version)});
  table.add({"changed_at", s->changed_at == TimePoint{} ? "-" : time_text(s->changed_at)});
  if (s->next_ticks.empty()) table.add({"next tick", "- (none: paused, past its end or its limit)"});
  for (const TimePoint t : s->next_ticks) table.add({"next tick", time_text(t)});
  table.add({"last tick", s->last_tick ? time_text(*s->last_tick) : "-"});
  table.add({"last outcome", s->last_outcome.empty() ? "-" : s->last_outcome});
  table.add({"last task id", s->last_task_id.empty() ? "-" : cell(s->last_task_id, 200)});
  table.add({"enqueued", std::to_string(s->enqueued)});
  table.add({"max_retries", optional_text(o.max_retries)});
  table.add({"priority", std::string(to_string(o.priority))});
  table.add({"jitter", ms_text(o.jitter.count())});
  table.add({"overlap", o.overlap == Overlap::skip         ? "skip"
                        : o.overlap == Overlap::buffer_one ? "buffer_one"
                                                           : "allow"});
  table.add({"limit", optional_text(o.limit)});
  table.add({"start", o.start ? time_text(*o.start) : "-"});
  table.add({"end", o.end ? time_text(*o.end) : "-"});
  std::cout << table.str();
  return ok;
}

/// What `schedules pause|resume|remove` do with the schedule `name`.
enum class Change { pause, resume, remove };

int change(const Context& g, const QueueArgs& a, const std::string& name, Change what,
           const std::string& note) {
  Schedules schedules = open(g, a);
  const bool found = what == Change::pause    ? schedules.pause(name, note)
                     : what == Change::resume ? schedules.resume(name)
                                              : schedules.remove(name);
  if (!found) return not_found_message(name, a.queue);
  const char* done = what == Change::pause ? "paused" : what == Change::resume ? "resumed" : "removed";
  if (g.json()) {
    std::cout << nlohmann::json{{"schedule", name}, {"done", done}}.dump() << "\n";
  } else {
    std::cout << "schedule " << name << " of " << a.queue << " " << done << "\n";
  }
  return ok;
}

/// The flags of `schedules upsert`.
struct UpsertArgs {
  QueueArgs queue;
  std::string name, schedule, type, payload = "{}", priority = "normal", overlap = "allow", start, end;
  std::optional<int> max_retries;
  std::optional<std::int64_t> limit;
  std::int64_t jitter_ms = 0;
};

int upsert(const Context& g, const UpsertArgs& a) {
  ScheduledTaskOptions o;
  o.max_retries = a.max_retries;
  o.priority = *parse_priority(a.priority);
  o.jitter = std::chrono::milliseconds(a.jitter_ms);
  o.overlap = a.overlap == "skip"         ? Overlap::skip
              : a.overlap == "buffer_one" ? Overlap::buffer_one
                                          : Overlap::allow;
  o.limit = a.limit;
  const auto bound = [](const char* flag, const std::string& text, std::optional<TimePoint>& into) {
    if (text.empty()) return true;
    into = parse_iso_time(text);
    if (into) return true;
    std::cerr
        << "streamq schedules upsert: " << flag << " \"" << text
        << "\" is not an ISO 8601 time with its zone (2027-01-07T09:00:00Z, 2027-01-07T09:00:00+01:00)\n";
    return false;
  };
  if (!bound("--start", a.start, o.start) || !bound("--end", a.end, o.end)) return usage;
  const Schedule schedule = Schedule::parse(a.schedule);  // ConfigError: usage
  Schedules schedules = open(g, a.queue);
  const UpsertOutcome outcome = schedules.upsert(a.name, schedule, a.type, Payload(a.payload), o);
  const char* done = outcome == UpsertOutcome::created   ? "created"
                     : outcome == UpsertOutcome::changed ? "changed"
                                                         : "unchanged";
  if (g.json()) {
    std::cout << nlohmann::json{{"schedule", a.name}, {"outcome", done}}.dump() << "\n";
  } else {
    std::cout << "schedule " << a.name << " of " << a.queue.queue << " " << done << "\n";
  }
  return ok;
}

/// `schedules <name> QUEUE NAME`: the queue flags and the schedule's name.
CLI::App* add_named(CLI::App& parent, const char* name, const char* description, QueueArgs& q,
                    std::string& schedule) {
  auto* sub = add_queue_command(parent, name, description, q.queue);
  sub->add_option("name", schedule, "the schedule")->required();
  add_queue_flags(sub, q);
  return sub;
}

struct NamedArgs {
  QueueArgs queue;
  std::string name, note;
  std::size_t next = 5;
};

}  // namespace

void add_schedules(CLI::App& app, Context& ctx) {
  auto* schedules = app.add_subcommand(
      "schedules",
      "a queue's stored schedules (schedules as data): list, show, pause, resume, remove, upsert");
  schedules->require_subcommand(1);

  auto listed = std::make_shared<QueueArgs>();
  auto* list_sub = add_queue_command(
      *schedules, "list",
      "every stored schedule of the queue: its state, source, next 3 ticks and last tick (outcome, task id)",
      listed->queue);
  add_queue_flags(list_sub, *listed);
  on_run(list_sub, ctx, [&ctx, listed] { return list(ctx, *listed); });

  auto shown = std::make_shared<NamedArgs>();
  auto* show_sub =
      add_named(*schedules, "show", "one schedule: its definition, options, next ticks, last tick",
                shown->queue, shown->name);
  show_sub->add_option("--next", shown->next, "next ticks shown (1 to 1000)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  on_run(show_sub, ctx, [&ctx, shown] { return show(ctx, shown->queue, shown->name, shown->next); });

  auto paused = std::make_shared<NamedArgs>();
  auto* pause_sub =
      add_named(*schedules, "pause", "no ticks until resumed (running Schedulers follow within a second)",
                paused->queue, paused->name);
  pause_sub->add_option("--note", paused->note, "why, and by whom (shown in the list)");
  on_run(pause_sub, ctx,
         [&ctx, paused] { return change(ctx, paused->queue, paused->name, Change::pause, paused->note); });

  auto resumed = std::make_shared<NamedArgs>();
  auto* resume_sub =
      add_named(*schedules, "resume", "ticks again from now on (ticks missed while paused are not caught up)",
                resumed->queue, resumed->name);
  on_run(resume_sub, ctx,
         [&ctx, resumed] { return change(ctx, resumed->queue, resumed->name, Change::resume, {}); });

  auto removed = std::make_shared<NamedArgs>();
  auto* remove_sub =
      add_named(*schedules, "remove",
                "no more ticks (its last tick stays recorded: adding it again runs no tick twice)",
                removed->queue, removed->name);
  on_run(remove_sub, ctx,
         [&ctx, removed] { return change(ctx, removed->queue, removed->name, Change::remove, {}); });

  auto up = std::make_shared<UpsertArgs>();
  auto* upsert_sub =
      add_named(*schedules, "upsert", "add a schedule or change its definition (a paused one stays paused)",
                up->queue, up->name);
  upsert_sub
      ->add_option("--schedule", up->schedule,
                   "when: a cron expression with an optional time zone or offset as its last word "
                   "(\"0 9 * * mon-fri Europe/Berlin\", \"*/5 * * * *\", \"0 9 * * * UTC+01:00\"), or "
                   "\"every 30000ms\"")
      ->required();
  upsert_sub->add_option("--type", up->type, "the task type of its tasks")->required();
  upsert_sub->add_option("--payload", up->payload, "JSON payload of its tasks")->capture_default_str();
  upsert_sub
      ->add_option("--max-retries", up->max_retries, "retries after the first attempt (default: the queue's)")
      ->check(CLI::NonNegativeNumber);
  add_priority(upsert_sub, up->priority, "its tasks' priority: high, normal or low")->capture_default_str();
  upsert_sub
      ->add_option("--jitter-ms", up->jitter_ms, "enqueue each tick's task up to this many ms after the tick")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  upsert_sub
      ->add_option("--overlap", up->overlap, "while the previous tick's task runs: allow, skip or buffer_one")
      ->check(CLI::IsMember({"allow", "skip", "buffer_one"}))
      ->capture_default_str();
  upsert_sub->add_option("--limit", up->limit, "at most this many ticks are ever enqueued")
      ->check(CLI::PositiveNumber);
  upsert_sub->add_option("--start", up->start,
                         "no tick before this ISO 8601 time (with its zone: Z or +01:00)");
  upsert_sub->add_option("--end", up->end, "no tick after this ISO 8601 time");
  on_run(upsert_sub, ctx, [&ctx, up] { return upsert(ctx, *up); });
}

}  // namespace streamq::cli
