// SPDX-License-Identifier: MIT
// streamq batch: one batch (Producer::open_batch): its state and counts.
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

int batch(const Context& g, const std::string& queue, const std::string& id) {
  Inspector in(g.inspector());
  const std::optional<BatchInfo> b = in.batch(queue, id);
  if (!b) {
    std::cerr << "streamq: no batch " << id << " in " << queue
              << " (never opened, or fired more than a day ago)\n";
    return not_found;
  }
  if (g.json()) {
    print_json(nlohmann::json::parse(b->to_json()));
    return ok;
  }
  Table table({"FIELD", "VALUE"});
  table.add({"batch_id", cell(b->batch_id, 200)});
  table.add({"state", cell(b->state, 40)});
  table.add({"total", std::to_string(b->total)});
  table.add({"done", std::to_string(b->done)});
  table.add({"failed", std::to_string(b->failed)});
  table.add({"pending", std::to_string(b->pending())});
  if (!b->parent_batch.empty()) table.add({"parent_batch", cell(b->parent_batch, 200)});
  std::cout << table.str();
  return ok;
}

struct BatchArgs {
  std::string queue, id;
};

}  // namespace

void add_batch(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<BatchArgs>();
  auto* sub = add_queue_command(app, "batch", "a batch's state and counts (done, failed, pending)", a->queue);
  sub->add_option("id", a->id, "the batch id (Producer::open_batch)")->required();
  on_run(sub, ctx, [&ctx, a] { return batch(ctx, a->queue, a->id); });
}

}  // namespace streamq::cli
