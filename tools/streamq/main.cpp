// SPDX-License-Identifier: MIT
// The streamq command: an operator's face on streamq::Inspector (and a Producer for enqueue).
// Every subcommand talks to Redis through the library; see `streamq --help` and docs/cli-and-dashboard.md.
// Each subcommand lives in commands/ (the dashboard in dashboard/) and registers itself here.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include <streamq/errors.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {

int run(int argc, char** argv) {
  CLI::App app{"streamq: inspect and operate streamq task queues on Redis"};
  app.require_subcommand(1);
  app.fallthrough();  // --url, --group and --format also after the subcommand
  Context ctx;
  add_global_options(app, ctx);
  for (const auto add : {add_queues, add_stats, add_tasks, add_task, add_dlq, add_delayed, add_cancel,
                         add_enqueue, add_events, add_flow, add_batch, add_pause_resume, add_tenants,
                         add_schedules, add_consumers, add_doctor, add_exporter, add_dashboard}) {
    add(app, ctx);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? ok : usage;
  }
  install_interrupt_handler();
  try {
    return ctx.action ? ctx.action() : usage;
  } catch (const ConfigError& e) {
    std::cerr << "streamq: " << e.what() << "\n";
    return usage;
  } catch (const PayloadError& e) {  // bad input (a payload that is not JSON): nothing was sent
    std::cerr << "streamq: " << e.what() << "\n";
    return usage;
  } catch (const std::exception& e) {  // streamq::Error (the server refused, or is out of reach) too
    std::cerr << "streamq: " << e.what() << "\n";
    return failed;
  }
}

}  // namespace streamq::cli

int main(int argc, char** argv) { return streamq::cli::run(argc, argv); }
