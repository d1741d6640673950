// SPDX-License-Identifier: MIT
// streamq dashboard: the JSON API (/api/...). Reads take turns on one shared Inspector; actions
// are POST requests with the CSRF check (Access::action_allowed), each on an Inspector of its own
// (a GET of one answers 405). Every answer is JSON, errors as {"error": ...} with a status the
// page shows.
#pragma once

#include <mutex>

#include <streamq/inspector.hpp>

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace streamq::cli::dashboard {

class Access;
class Sampler;

/// What the API's handlers use; each part outlives the server.
struct Api {
  Inspector& inspector;  ///< the reads' one (the sampler has its own)
  std::mutex& inspector_mutex;
  const InspectorOptions& inspector_options;  ///< each action connects on its own
  const Sampler& sampler;
  const Access& access;
  double sample_interval;  ///< seconds, as --sample-interval gave it
};

/// Registers GET /api/queues, /api/queue, /api/record, /api/task, /api/batch, /api/tasks,
/// /api/tenants, /api/schedules and the actions POST /api/replay, /api/delete, /api/run_now,
/// /api/cancel, /api/pause, /api/resume, /api/tenant/pause, /api/tenant/resume,
/// /api/schedule/pause, /api/schedule/resume (each with its parameters and
/// answer in docs/cli-and-dashboard.md, "The dashboard's JSON API").
void add_api(httplib::Server& server, const Api& api);

/// Cache-Control: no-store (the pages and every API answer).
void no_store(httplib::Response& res);

}  // namespace streamq::cli::dashboard
