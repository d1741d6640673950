// SPDX-License-Identifier: MIT
// streamq stats: queue health (length, pending, delayed, dead, consumers, ages), once or --watch.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

void print_stats(const Context& g, const std::vector<QueueStats>& all) {
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const QueueStats& s : all) arr.push_back(nlohmann::json::parse(s.to_json()));
    print_json(arr);
    return;
  }
  Table t({"QUEUE", "LENGTH", "PENDING", "DELAYED", "DEAD", "CONSUMERS", "OLDEST", "OLDEST PENDING IDLE"});
  for (const QueueStats& s : all) {
    std::size_t consumers = 0;
    std::optional<std::int64_t> idle;
    for (const GroupInfo& gi : s.groups) {
      consumers += gi.consumers.size();
      if (gi.oldest_pending_idle_ms) idle = std::max(idle.value_or(0), *gi.oldest_pending_idle_ms);
    }
    std::optional<std::int64_t> oldest;
    for (const LevelStats& l : s.levels) {
      if (l.oldest_entry_age_ms) oldest = std::max(oldest.value_or(0), *l.oldest_entry_age_ms);
    }
    t.add({cell(s.stream), std::to_string(s.length), std::to_string(s.pending_total),
           std::to_string(s.delayed), std::to_string(s.dlq_length), std::to_string(consumers),
           oldest ? ms_text(*oldest) : "-", idle ? ms_text(*idle) : "-"});
  }
  std::cout << t.str();
}

int stats(const Context& g, const std::vector<std::string>& names, double watch) {
  Inspector in(g.inspector());
  for (;;) {
    std::vector<std::string> queues = names;
    if (queues.empty()) {
      for (const QueueInfo& q : in.queues()) queues.push_back(q.name);
    }
    std::vector<QueueStats> all;
    for (const std::string& q : queues) all.push_back(in.stats(q));
    if (watch > 0 && isatty(STDOUT_FILENO)) std::cout << "\x1b[H\x1b[2J";  // clear the screen
    print_stats(g, all);
    if (watch <= 0) return ok;
    std::cout << std::flush;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(watch);
    while (std::chrono::steady_clock::now() < until) {
      if (interrupted.load()) return ok;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a terminal loop; no event to await
    }
  }
}

struct StatsArgs {
  std::vector<std::string> names;
  double watch = 0;
};

}  // namespace

void add_stats(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<StatsArgs>();
  auto* sub = app.add_subcommand("stats", "queue health: length, pending, delayed, dead, consumers, ages");
  sub->add_option("queue", a->names, "queues (default: every queue found)");
  sub->add_option("--watch", a->watch, "refresh every this many seconds until Ctrl-C")
      ->check(CLI::NonNegativeNumber);
  on_run(sub, ctx, [&ctx, a] { return stats(ctx, a->names, a->watch); });
}

}  // namespace streamq::cli
