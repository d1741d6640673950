// SPDX-License-Identifier: MIT
// What every subcommand of the streamq command shares: the global options (--url, --group,
// --format), the action that parsing chose, and the arguments several subcommands take alike.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>
#include <streamq/inspector.hpp>

namespace streamq::cli {

struct Context {
  std::string url = "redis://127.0.0.1:6379";
  std::string group = "workers";
  std::string format = "table";
  /// What the parsed subcommand does; returns an exit status. Set by on_run().
  std::function<int()> action;

  bool json() const { return format == "json"; }
  InspectorOptions inspector() const { return {.connection = {.url = url}, .group = group}; }
};

/// --url, --group and --format on `app` (and, by fallthrough, after any subcommand).
void add_global_options(CLI::App& app, Context& ctx);

/// Makes `action` what runs once `sub` was parsed.
void on_run(CLI::App* sub, Context& ctx, std::function<int()> action);

/// `parent <name>` with the required positional "queue" (what most subcommands act on).
CLI::App* add_queue_command(CLI::App& parent, const std::string& name, const std::string& description,
                            std::string& queue);
/// --yes/-y: do not ask for confirmation.
void add_yes(CLI::App* sub, bool& yes);
/// --count (1 to 10,000, described as `what`) and --cursor of a listing a page at a time.
void add_page(CLI::App* sub, std::size_t& count, std::string& cursor, const char* what);
/// --priority: high, normal or low.
CLI::Option* add_priority(CLI::App* sub, std::string& priority, const char* what);

/// `doc` indented, for --format json (bytes that are not UTF-8 replaced).
void print_json(const nlohmann::json& doc);

}  // namespace streamq::cli
