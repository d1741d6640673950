// SPDX-License-Identifier: MIT
// streamq pause and streamq resume: whether workers take the queue's tasks.
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {

void add_pause_resume(CLI::App& app, Context& ctx) {
  const auto add = [&](const char* name, const char* description, bool pause) {
    auto queue = std::make_shared<std::string>();
    auto* sub = add_queue_command(app, name, description, *queue);
    on_run(sub, ctx, [&ctx, queue, pause] {
      Inspector in(ctx.inspector());
      if (pause) {
        in.pause(*queue);
      } else {
        in.resume(*queue);
      }
      std::cout << *queue << (pause ? " paused" : " resumed") << "\n";
      return int{ok};
    });
  };
  add("pause", "workers stop taking new tasks of the queue (running ones finish)", true);
  add("resume", "workers take the queue's tasks again", false);
}

}  // namespace streamq::cli
