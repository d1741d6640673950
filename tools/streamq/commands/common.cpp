// SPDX-License-Identifier: MIT
#include "commands/common.hpp"

#include <iostream>

namespace streamq::cli {

void add_global_options(CLI::App& app, Context& ctx) {
  app.add_option("--url", ctx.url,
                 "Redis URL (redis://[user[:password]@]host[:port][/db], "
                 "redis+sentinel://host:port[,host:port...]/master-name[/db], "
                 "redis+cluster://host:port[,host:port...] or unix:///path)")
      ->envname("STREAMQ_URL")
      ->capture_default_str();
  app.add_option("--group", ctx.group, "consumer group")->capture_default_str();
  app.add_option("--format", ctx.format, "output of listing commands")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
}

void on_run(CLI::App* sub, Context& ctx, std::function<int()> action) {
  sub->callback([&ctx, action = std::move(action)] { ctx.action = action; });
}

CLI::App* add_queue_command(CLI::App& parent, const std::string& name, const std::string& description,
                            std::string& queue) {
  auto* sub = parent.add_subcommand(name, description);
  sub->add_option("queue", queue, "the queue")->required();
  return sub;
}

void add_yes(CLI::App* sub, bool& yes) { sub->add_flag("--yes,-y", yes, "do not ask for confirmation"); }

void add_page(CLI::App* sub, std::size_t& count, std::string& cursor, const char* what) {
  sub->add_option("--count", count, what)->check(CLI::Range(1, 10000))->capture_default_str();
  sub->add_option("--cursor", cursor, "continue where the previous page ended");
}

CLI::Option* add_priority(CLI::App* sub, std::string& priority, const char* what) {
  return sub->add_option("--priority", priority, what)->check(CLI::IsMember({"high", "normal", "low"}));
}

void print_json(const nlohmann::json& doc) {
  std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace streamq::cli
