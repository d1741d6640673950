// SPDX-License-Identifier: MIT
// streamq events: follow the events of the queue's tracked tasks.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

/// The queue's events from `from` ("$": new ones), followed until Ctrl-C, or until `count` were
/// printed (> 0).
int events(const Context& g, const std::string& queue, const std::string& from, long count) {
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
        for (const auto& [k, v] : e.fields) {
          line += ' ';
          line += cell(k, 40);
          line += '=';
          line += cell(v, 80);
        }
        std::cout << line << std::endl;
      }
      if (count > 0 && ++printed >= count) return ok;
    }
    after = batch.next;
  }
  return aborted;
}

struct EventsArgs {
  std::string queue, from = "$";
  long count = 0;
};

}  // namespace

void add_events(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<EventsArgs>();
  auto* sub = add_queue_command(app, "events", "follow the events of the queue's tracked tasks (Ctrl-C ends)",
                                a->queue);
  sub->add_option("--from", a->from, "start after this event id (0: from the oldest kept; $: new ones)")
      ->capture_default_str();
  sub->add_option("--count", a->count, "stop after this many events (0: follow until Ctrl-C)")
      ->check(CLI::NonNegativeNumber);
  on_run(sub, ctx, [&ctx, a] { return events(ctx, a->queue, a->from == "0" ? "0-0" : a->from, a->count); });
}

}  // namespace streamq::cli
