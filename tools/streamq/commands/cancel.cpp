// SPDX-License-Identifier: MIT
// streamq cancel: a queued or delayed task, or ask the worker running one to stop it.
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

struct CancelArgs {
  std::string queue, id;
  bool yes = false;
};

int cancel(const Context& g, const CancelArgs& a) {
  if (!a.yes && !confirm("Cancel task " + a.id + " of " + a.queue + "?")) return aborted;
  Inspector in(g.inspector());
  switch (in.cancel(a.queue, a.id)) {
    case CancelOutcome::cancelled: std::cout << "cancelled " << a.id << "\n"; return ok;
    case CancelOutcome::running:
      // Not cancelled yet (exit 1, as docs/cli-and-dashboard.md says): asked.
      std::cout << "cancelling " << a.id
                << ": a consumer holds it; its worker asks the handler to stop now, and it ends cancelled "
                   "(a worker that takes it over does not run it)\n";
      return failed;
    case CancelOutcome::missing:
      std::cerr << "streamq: no queued, delayed or backlog task " << a.id << "\n";
      return not_found;
  }
  return usage;
}

}  // namespace

void add_cancel(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<CancelArgs>();
  auto* sub = add_queue_command(app, "cancel",
                                "cancel a queued or delayed task or one in its tenant's backlog, or ask the "
                                "worker running one to stop it",
                                a->queue);
  sub->add_option("id", a->id, "entry id (<partition>/<ms>-<seq> in a partitioned queue) or task_id")
      ->required();
  add_yes(sub, a->yes);
  on_run(sub, ctx, [&ctx, a] { return cancel(ctx, *a); });
}

}  // namespace streamq::cli
