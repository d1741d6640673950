// SPDX-License-Identifier: MIT
// streamq flow: a flow's task and the tasks below it, as a tree with each one's state.
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

nlohmann::json tree_json(const FlowTree& t) {
  nlohmann::json j = {
      {"task_id", t.task_id},
      {"queue", t.queue},
      {"record", t.record ? nlohmann::json::parse(t.record->to_json()) : nlohmann::json(nullptr)}};
  j["children"] = nlohmann::json::array();
  for (const FlowTree& c : t.children) j["children"].push_back(tree_json(c));
  return j;
}

/// One line per task: indented by its depth, its id, type and state (and why it is dead), and
/// the queue of a task in another queue than its parent's.
void print_tree(const FlowTree& t, const std::string& indent, const std::string& parent_queue) {
  std::string line = indent + cell(t.task_id, 64);
  if (t.record) {
    line += "  " + cell(t.record->task_type, 64) + "  " + std::string(to_string(t.record->state));
    if (!t.record->reason.empty()) line += " (" + cell(t.record->reason, 64) + ")";
  } else {
    line += "  (no record: its retention passed)";
  }
  if (!parent_queue.empty() && t.queue != parent_queue) line += "  [queue " + cell(t.queue, 64) + "]";
  std::cout << line << "\n";
  for (const FlowTree& c : t.children) print_tree(c, indent + "  ", t.queue);
}

int flow(const Context& g, const std::string& queue, const std::string& id) {
  Inspector in(g.inspector());
  const std::optional<FlowTree> tree = in.flow(queue, id);
  if (!tree) {
    std::cerr << "streamq: no record of task " << id << " in " << queue << "\n";
    return not_found;
  }
  if (g.json()) {
    print_json(tree_json(*tree));
    return ok;
  }
  // A task below a flow's root: the line above it names its parent (`streamq flow` of that one
  // shows more of the flow).
  if (tree->record && !tree->record->parent.empty()) {
    std::string line = "parent: " + cell(tree->record->parent, 64);
    if (!tree->record->parent_queue.empty() && tree->record->parent_queue != tree->queue)
      line += "  [queue " + cell(tree->record->parent_queue, 64) + "]";
    std::cout << line << "\n";
  }
  print_tree(*tree, "", "");
  return ok;
}

struct FlowArgs {
  std::string queue, id;
};

}  // namespace

void add_flow(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<FlowArgs>();
  auto* sub =
      add_queue_command(app, "flow", "a flow's task and the tasks below it, with their states", a->queue);
  sub->add_option("id", a->id, "the task id (of a flow's root, or of any task in it)")->required();
  on_run(sub, ctx, [&ctx, a] { return flow(ctx, a->queue, a->id); });
}

}  // namespace streamq::cli
