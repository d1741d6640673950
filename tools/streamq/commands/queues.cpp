// SPDX-License-Identifier: MIT
// streamq queues: every queue on the server (SCAN, never KEYS).
#include <iostream>
#include <string>
#include <vector>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

std::string level_list(const std::vector<Priority>& levels) {
  std::string out;
  for (Priority p : levels) out += (out.empty() ? "" : ",") + std::string(to_string(p));
  return out.empty() ? "-" : out;
}

int queues(const Context& g) {
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
    print_json(arr);
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

}  // namespace

void add_queues(CLI::App& app, Context& ctx) {
  auto* sub = app.add_subcommand("queues", "list every queue on the server (SCAN, never KEYS)");
  on_run(sub, ctx, [&ctx] { return queues(ctx); });
}

}  // namespace streamq::cli
