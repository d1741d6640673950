// SPDX-License-Identifier: MIT
// streamq consumers: the consumers of the queue's groups.
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

int consumers(const Context& g, const std::string& queue) {
  Inspector in(g.inspector());
  const QueueStats s = in.stats(queue);
  if (g.json()) {
    print_json(nlohmann::json::parse(s.to_json())["groups"]);
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

}  // namespace

void add_consumers(CLI::App& app, Context& ctx) {
  auto queue = std::make_shared<std::string>();
  auto* sub = add_queue_command(app, "consumers", "consumers of the queue's groups", *queue);
  on_run(sub, ctx, [&ctx, queue] { return consumers(ctx, *queue); });
}

}  // namespace streamq::cli
