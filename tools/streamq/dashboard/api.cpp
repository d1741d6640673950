// SPDX-License-Identifier: MIT
#include "dashboard/api.hpp"

#include <httplib.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dashboard/access.hpp"
#include "dashboard/sampler.hpp"
#include "output.hpp"
#include "schedule_queue.hpp"
#include "streamq/errors.hpp"
#include "tenant_json.hpp"

namespace streamq::cli::dashboard {
namespace {

using json = nlohmann::json;

struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What an action names is not there (a schedule): 404.
struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string required_param(const httplib::Request& req, const char* name) {
  std::string v = req.get_param_value(name);
  if (v.empty()) throw BadRequest(std::string("missing parameter ") + name);
  return v;
}

/// The "count" parameter: `fallback` when absent, else 1 to `most`.
std::size_t count_param(const httplib::Request& req, std::size_t fallback, std::size_t most) {
  if (!req.has_param("count")) return fallback;
  std::size_t count = 0;
  try {
    count = std::stoul(req.get_param_value("count"));
  } catch (const std::exception&) {
    count = 0;
  }
  if (count < 1 || count > most) throw BadRequest("count must be 1 to " + std::to_string(most));
  return count;
}

json parse_body(const httplib::Request& req) {
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object()) throw BadRequest("the body must be a JSON object");
  return body;
}

std::string body_string(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    throw BadRequest(std::string("\"") + name + "\" must be a non-empty string");
  }
  return it->get<std::string>();
}

/// The "ids" of an action's body: absent gives none, present must be 1 to 10,000 strings.
std::vector<std::string> body_ids(const json& body) {
  std::vector<std::string> ids;
  const auto it = body.find("ids");
  if (it == body.end()) return ids;
  if (!it->is_array() || it->empty() || it->size() > 10000) {
    throw BadRequest("\"ids\" must be an array of 1 to 10,000 entry ids");
  }
  for (const json& id : *it) {
    if (!id.is_string()) throw BadRequest("\"ids\" must hold strings");
    ids.push_back(id.get<std::string>());
  }
  return ids;
}

/// The optional string `name` of a body ("" when absent), at most `most` bytes.
std::string body_optional_string(const json& body, const char* name, std::size_t most) {
  const auto it = body.find(name);
  if (it == body.end()) return {};
  if (!it->is_string() || it->get_ref<const std::string&>().size() > most) {
    throw BadRequest(std::string("\"") + name + "\" must be a string of at most " + std::to_string(most) +
                     " bytes");
  }
  return it->get<std::string>();
}

bool body_flag(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end()) return false;
  if (!it->is_boolean()) throw BadRequest(std::string("\"") + name + "\" must be true or false");
  return it->get<bool>();
}

json action_json(const ActionResult& r) {
  return {{"done", r.done}, {"skipped", r.skipped}, {"finished", r.finished}};
}

/// Ctrl-C stops a bulk replay or delete between two batches (each batch happens whole).
bool until_interrupted(const Progress&) { return !interrupted.load(); }

/// Runs `body` and answers its JSON, or its error as JSON with a status the page shows.
template <class Body>
void respond(httplib::Response& res, Body&& body) {
  no_store(res);
  try {
    res.set_content(body().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  } catch (const BadRequest& e) {
    Access::refuse(res, 400, e.what());
  } catch (const NotFound& e) {
    Access::refuse(res, 404, e.what());
  } catch (const ConfigError& e) {
    Access::refuse(res, 400, e.what());
  } catch (const Error& e) {
    Access::refuse(res, 502, e.what());
  } catch (const std::exception& e) {
    Access::refuse(res, 500, e.what());
  }
}

/// GET `path`: what `body(inspector, request)` gives, on the shared Inspector, one call at a time.
template <class Body>
void read(httplib::Server& server, const Api& api, const char* path, Body body) {
  server.Get(path, [api, body](const httplib::Request& req, httplib::Response& res) {
    respond(res, [&] {
      std::lock_guard lock(api.inspector_mutex);
      return body(api.inspector, req);
    });
  });
}

/// POST `path`: what `body(inspector, request)` gives, on an Inspector (a connection) of its own,
/// so that a long replay does not hold up the page's reads; with the CSRF check. A GET answers 405.
template <class Body>
void action(httplib::Server& server, const Api& api, const char* path, Body body) {
  server.Post(path, [api, body](const httplib::Request& req, httplib::Response& res) {
    if (!api.access.action_allowed(req, res)) return;
    respond(res, [&] {
      Inspector own(api.inspector_options);
      return body(own, req);
    });
  });
  server.Get(path, [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Allow", "POST");
    Access::refuse(res, 405, "actions are POST requests");
  });
}

/// The stored schedules of `queue` (its partitions found by `in`), for a read or an action.
Schedules schedules_of(const Api& api, Inspector& in, const std::string& queue) {
  return queue_schedules(api.inspector_options.connection, queue, find_partitions(in, queue));
}

/// A flow's task's neighbours, for its detail view: its parent and its first kMostChildren
/// children, each {task_id, queue, task_type, state} (state null: no record, its retention passed).
json flow_of(Inspector& in, const std::string& queue, const TaskRecord& r) {
  constexpr std::size_t kMostChildren = 100;
  const auto brief = [&](const std::string& id, const std::string& in_queue) {
    const auto rec = in.record(in_queue, id);
    return json{{"task_id", id},
                {"queue", in_queue},
                {"task_type", rec ? json(rec->task_type) : json(nullptr)},
                {"state", rec ? json(std::string(to_string(rec->state))) : json(nullptr)}};
  };
  json children = json::array();
  for (std::size_t i = 0; i < r.children.size() && i < kMostChildren; ++i) {
    const auto elsewhere = r.child_queues.find(r.children[i]);  // in another queue (FlowNode::queue)
    children.push_back(brief(r.children[i], elsewhere != r.child_queues.end() ? elsewhere->second : queue));
  }
  // The parent beside it (in any partition of this queue), else where its record says it is
  // (a child in another queue).
  json parent = nullptr;
  if (!r.parent.empty()) {
    parent = brief(r.parent, queue);
    if (parent["state"].is_null() && !r.parent_queue.empty()) parent = brief(r.parent, r.parent_queue);
  }
  return json{{"parent", std::move(parent)},
              {"children", std::move(children)},
              {"children_total", r.children.size()}};
}

}  // namespace

void no_store(httplib::Response& res) { res.set_header("Cache-Control", "no-store"); }

void add_api(httplib::Server& server, const Api& api) {
  read(server, api, "/api/queues", [](Inspector& in, const httplib::Request&) {
    json list = json::array();
    for (const QueueInfo& q : in.queues()) {
      json levels = json::array();
      for (const Priority p : q.levels) levels.push_back(to_string(p));
      list.push_back({{"name", q.name},
                      {"partitions", std::max<std::size_t>(1, q.partitions.size())},
                      {"levels", levels},
                      {"length", q.length},
                      {"dlq_length", q.dlq_length},
                      {"delayed", q.delayed_count},
                      {"paused", q.paused}});
    }
    return json{{"queues", list}};
  });
  read(server, api, "/api/queue", [api](Inspector& in, const httplib::Request& req) {
    const std::string name = required_param(req, "name");
    const QueueStats stats = in.stats(name);
    return json{{"stats", json::parse(stats.to_json())},
                {"paused", in.paused(name)},
                {"series", api.sampler.series(name)},
                {"sample_interval_s", api.sample_interval},
                {"sampler_error", api.sampler.last_error()}};
  });
  read(server, api, "/api/record", [](Inspector& in, const httplib::Request& req) {
    const std::string name = required_param(req, "name");
    const auto r = in.record(name, required_param(req, "id"));
    json out{{"record", r ? json::parse(r->to_json()) : json(nullptr)}};
    if (r && (!r->parent.empty() || !r->children.empty())) out["flow"] = flow_of(in, name, *r);
    return out;
  });
  read(server, api, "/api/task", [](Inspector& in, const httplib::Request& req) {
    const std::string name = required_param(req, "name");
    const std::string id = required_param(req, "id");
    const auto t = in.task(name, id);
    // A tracked task's record also once it finished and left every stream (by its task id).
    const auto r = t ? t->record : in.record(name, id);
    json out{{"task", t ? json::parse(t->to_json()) : json(nullptr)},
             {"record", r ? json::parse(r->to_json()) : json(nullptr)}};
    if (r && (!r->parent.empty() || !r->children.empty())) out["flow"] = flow_of(in, name, *r);
    return out;
  });
  read(server, api, "/api/batch", [](Inspector& in, const httplib::Request& req) {
    const auto b = in.batch(required_param(req, "name"), required_param(req, "id"));
    return json{{"batch", b ? json::parse(b->to_json()) : json(nullptr)}};
  });
  read(server, api, "/api/tasks", [](Inspector& in, const httplib::Request& req) {
    const std::string name = required_param(req, "name");
    const auto state = parse_task_state(required_param(req, "state"));
    if (!state) throw BadRequest("state must be queued, pending, delayed, dead or backlog");
    const std::size_t count = count_param(req, 20, 500);
    const TaskPage p = in.tasks(
        name,
        {.state = *state, .level = std::nullopt, .cursor = req.get_param_value("cursor"), .count = count});
    json tasks = json::array();
    for (const TaskInfo& t : p.tasks) tasks.push_back(json::parse(t.to_json()));
    return json{{"tasks", tasks}, {"next_cursor", p.next_cursor}};
  });

  read(server, api, "/api/tenants", [](Inspector& in, const httplib::Request& req) {
    const std::string name = required_param(req, "name");
    json tenants = json::array();
    for (const TenantInfo& t : in.tenants(name, count_param(req, 100, 10000)))
      tenants.push_back(tenant_json(t));
    return json{{"tenants", tenants}};
  });

  read(server, api, "/api/schedules", [api](Inspector& in, const httplib::Request& req) {
    const std::string name = required_param(req, "name");
    json list = json::array();
    for (const ScheduleInfo& s : schedules_of(api, in, name).list(3))
      list.push_back(json::parse(s.to_json()));
    return json{{"schedules", list}};
  });

  action(server, api, "/api/replay", [](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    ReplayOptions o;
    o.filter.ids = body_ids(body);
    o.progress = until_interrupted;
    if (o.filter.ids.empty() && !body_flag(body, "all")) {
      throw BadRequest("give the dead letters' \"ids\", or \"all\": true to replay every one");
    }
    return action_json(in.replay(body_string(body, "queue"), o));
  });
  action(server, api, "/api/delete", [](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    DeadLetterFilter filter;
    filter.ids = body_ids(body);
    if (filter.ids.empty()) throw BadRequest("\"ids\" must list the dead letters to delete");
    return action_json(in.delete_dead(body_string(body, "queue"), filter, until_interrupted));
  });
  action(server, api, "/api/run_now", [](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    const auto entry = in.run_now(body_string(body, "queue"), body_string(body, "task_id"));
    return json{{"entry_id", entry ? json(*entry) : json(nullptr)}};
  });
  action(server, api, "/api/cancel", [](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    switch (in.cancel(body_string(body, "queue"), body_string(body, "id"))) {
      case CancelOutcome::cancelled: return json{{"outcome", "cancelled"}};
      case CancelOutcome::running: return json{{"outcome", "running"}};
      case CancelOutcome::missing: break;
    }
    return json{{"outcome", "missing"}};
  });
  action(server, api, "/api/pause", [](Inspector& in, const httplib::Request& req) {
    in.pause(body_string(parse_body(req), "queue"));
    return json{{"paused", true}};
  });
  action(server, api, "/api/resume", [](Inspector& in, const httplib::Request& req) {
    in.resume(body_string(parse_body(req), "queue"));
    return json{{"paused", false}};
  });
  action(server, api, "/api/tenant/pause", [](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    const std::string tenant = body_string(body, "tenant");
    in.pause_tenant(body_string(body, "queue"), tenant);
    return json{{"tenant", tenant}, {"paused", true}};
  });
  action(server, api, "/api/tenant/resume", [](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    const std::string tenant = body_string(body, "tenant");
    in.resume_tenant(body_string(body, "queue"), tenant);
    return json{{"tenant", tenant}, {"paused", false}};
  });
  action(server, api, "/api/schedule/pause", [api](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    const std::string queue = body_string(body, "queue");
    const std::string name = body_string(body, "schedule");
    if (!schedules_of(api, in, queue).pause(name, body_optional_string(body, "note", 1000))) {
      throw NotFound("no schedule " + name + " in " + queue);
    }
    return json{{"schedule", name}, {"paused", true}};
  });
  action(server, api, "/api/schedule/resume", [api](Inspector& in, const httplib::Request& req) {
    const json body = parse_body(req);
    const std::string queue = body_string(body, "queue");
    const std::string name = body_string(body, "schedule");
    if (!schedules_of(api, in, queue).resume(name)) throw NotFound("no schedule " + name + " in " + queue);
    return json{{"schedule", name}, {"paused", false}};
  });
}

}  // namespace streamq::cli::dashboard
