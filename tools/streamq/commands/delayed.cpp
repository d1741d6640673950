// SPDX-License-Identifier: MIT
// streamq delayed: delayed tasks: list, run now.
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

int run_now(const Context& g, const std::string& queue, const std::string& id) {
  Inspector in(g.inspector());
  const auto entry = in.run_now(queue, id);
  if (!entry) {
    std::cerr << "streamq: no delayed task " << id << " in " << queue << " (it may have become due)\n";
    return not_found;
  }
  std::cout << (g.json() ? nlohmann::json{{"entry_id", *entry}}.dump() : *entry) << "\n";
  return ok;
}

struct RunArgs {
  std::string queue, id;
};

}  // namespace

void add_delayed(CLI::App& app, Context& ctx) {
  auto* delayed = app.add_subcommand("delayed", "delayed tasks: list, run now");
  delayed->require_subcommand(1);
  add_state_list(*delayed, "list", "list delayed tasks in due order", TaskState::delayed, ctx);
  auto a = std::make_shared<RunArgs>();
  auto* run = add_queue_command(*delayed, "run", "move a delayed task to its queue now", a->queue);
  run->add_option("task_id", a->id, "the task's id")->required();
  on_run(run, ctx, [&ctx, a] { return run_now(ctx, a->queue, a->id); });
}

}  // namespace streamq::cli
