// SPDX-License-Identifier: MIT
// The subcommands of the streamq command: each add_* registers its own on the app (in the
// order `streamq --help` lists them), with its options and its action (see on_run()).
#pragma once

#include <CLI/CLI.hpp>
#include <streamq/inspector.hpp>

#include "commands/common.hpp"

namespace streamq::cli {

void add_queues(CLI::App& app, Context& ctx);        // queues.cpp
void add_stats(CLI::App& app, Context& ctx);         // stats.cpp
void add_tasks(CLI::App& app, Context& ctx);         // tasks.cpp
void add_task(CLI::App& app, Context& ctx);          // task.cpp
void add_dlq(CLI::App& app, Context& ctx);           // dead.cpp: dlq list, replay, delete, purge
void add_delayed(CLI::App& app, Context& ctx);       // delayed.cpp: delayed list, run
void add_cancel(CLI::App& app, Context& ctx);        // cancel.cpp
void add_enqueue(CLI::App& app, Context& ctx);       // enqueue.cpp
void add_events(CLI::App& app, Context& ctx);        // events.cpp
void add_flow(CLI::App& app, Context& ctx);          // flow.cpp
void add_batch(CLI::App& app, Context& ctx);         // batch.cpp
void add_pause_resume(CLI::App& app, Context& ctx);  // pause.cpp: pause, resume
void add_tenants(CLI::App& app, Context& ctx);       // tenants.cpp: tenants list, set, clear, ...
void add_schedules(CLI::App& app, Context& ctx);     // schedules.cpp: schedules list, show, pause, ...
void add_consumers(CLI::App& app, Context& ctx);     // consumers.cpp
void add_doctor(CLI::App& app, Context& ctx);        // doctor.cpp
void add_exporter(CLI::App& app, Context& ctx);      // exporter.cpp
void add_dashboard(CLI::App& app, Context& ctx);     // ../dashboard/server.cpp

/// `parent <name>`: one page of the queue's tasks in `state` (tasks.cpp; for dlq list and
/// delayed list).
void add_state_list(CLI::App& parent, const char* name, const char* description, TaskState state,
                    Context& ctx);

}  // namespace streamq::cli
