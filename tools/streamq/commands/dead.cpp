// SPDX-License-Identifier: MIT
// streamq dlq: dead letters: list, replay, delete, purge.
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

struct DeadArgs {
  std::string queue;
  DeadLetterFilter filter;
  std::string priority = "normal";
  bool yes = false;
};

int report_action(const Context& g, const char* verb, const ActionResult& r) {
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

/// dlq replay (`replay`) or dlq delete: the dead letters the filter selects, once confirmed.
int replay_or_delete(const Context& g, const DeadArgs& a, bool replay) {
  const DeadLetterFilter& filter = a.filter;
  Inspector in(g.inspector());
  const std::int64_t total =
      filter.ids.empty() ? in.stats(a.queue).dlq_length : static_cast<std::int64_t>(filter.ids.size());
  const std::string what = std::string(replay ? "Replay" : "Delete") + " the dead letters of " + a.queue +
                           (filter.task_type.empty() ? "" : " of type " + filter.task_type) +
                           (filter.reason.empty() ? "" : " with reason " + filter.reason) + " (" +
                           (filter.ids.empty() ? "up to " : "") + std::to_string(total) + ")?";
  if (!a.yes && !confirm(what)) return aborted;
  ProgressLine line(replay ? "replayed" : "deleted");
  ActionResult r;
  if (replay) {
    r = in.replay(a.queue,
                  {.filter = filter, .priority = *parse_priority(a.priority), .progress = progress_to(line)});
  } else {
    r = in.delete_dead(a.queue, filter, progress_to(line));
  }
  line.finish();
  return report_action(g, replay ? "replayed" : "deleted", r);
}

int purge(const Context& g, const DeadArgs& a) {
  Inspector in(g.inspector());
  if (!a.yes && !confirm("Delete all " + std::to_string(in.stats(a.queue).dlq_length) + " dead letters of " +
                         a.queue + "?"))
    return aborted;
  const std::int64_t n = in.purge_dead(a.queue);
  std::cout << (g.json() ? nlohmann::json{{"purged", n}}.dump() : "purged " + std::to_string(n)) << "\n";
  return ok;
}

/// `dlq <name>`: replay or delete, with the options that select dead letters.
void add_filtered(CLI::App& dlq, const char* name, const char* description, bool replay, Context& ctx) {
  auto a = std::make_shared<DeadArgs>();
  auto* sub = add_queue_command(dlq, name, description, a->queue);
  sub->add_option(
      "--id", a->filter.ids,
      "only these dead-letter entry ids (repeatable; <partition>/<ms>-<seq> in a partitioned queue)");
  sub->add_option("--type", a->filter.task_type, "only tasks of this type");
  sub->add_option("--reason", a->filter.reason, "only this reason (max_retries, permanent, no_handler, ...)");
  add_yes(sub, a->yes);
  if (replay) add_priority(sub, a->priority, "the level they go back to")->capture_default_str();
  on_run(sub, ctx, [&ctx, a, replay] { return replay_or_delete(ctx, *a, replay); });
}

}  // namespace

void add_dlq(CLI::App& app, Context& ctx) {
  auto* dlq = app.add_subcommand("dlq", "dead letters: list, replay, delete, purge");
  dlq->require_subcommand(1);
  add_state_list(*dlq, "list", "list dead letters", TaskState::dead, ctx);
  add_filtered(*dlq, "replay", "put dead-lettered tasks back into the queue (fresh attempts)", true, ctx);
  add_filtered(*dlq, "delete", "delete dead letters", false, ctx);
  auto a = std::make_shared<DeadArgs>();
  auto* purge_cmd = add_queue_command(*dlq, "purge", "delete the whole dead-letter stream", a->queue);
  add_yes(purge_cmd, a->yes);
  on_run(purge_cmd, ctx, [&ctx, a] { return purge(ctx, *a); });
}

}  // namespace streamq::cli
