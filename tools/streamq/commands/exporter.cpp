// SPDX-License-Identifier: MIT
// streamq exporter: Prometheus metrics of every queue on /metrics (cpp-httplib).
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "commands/commands.hpp"
#include "output.hpp"
#include "schedule_queue.hpp"
#include "serve.hpp"
#include "streamq/errors.hpp"

namespace streamq::cli {
namespace {

/// A Prometheus label value: backslash, double quote and newline escaped.
std::string prometheus_label(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

/// The events of every queue's tracked tasks since this exporter started, by type: read on
/// from where the last scrape stopped (at most 10 pages of 10,000 per queue and scrape; a
/// backlog beyond that is read by the next scrapes).
class EventCounter {
 public:
  void read(Inspector& in, const std::string& queue) {
    auto [it, fresh] = next_.try_emplace(queue, "$");
    for (int page = 0; page < 10; ++page) {
      const Inspector::QueueEvents batch = in.events(queue, it->second, 10000);
      for (const QueueEvent& e : batch.events) ++counts_[queue][e.event];
      it->second = batch.next;
      if (batch.events.size() < 10000) break;
    }
    (void)fresh;
  }
  /// streamq_events_total{stream, event}: a counter (it starts again with the exporter).
  std::string exposition() const {
    std::string text =
        "# HELP streamq_events_total Events of tracked tasks (EnqueueOptions::retention) since the exporter "
        "started, by type.\n# TYPE streamq_events_total counter\n";
    for (const auto& [queue, counts] : counts_) {
      for (const auto& [event, n] : counts) {
        text += "streamq_events_total{stream=\"" + prometheus_label(queue) + "\",event=\"" +
                prometheus_label(event) + "\"} " + std::to_string(n) + "\n";
      }
    }
    return text;
  }

 private:
  std::map<std::string, std::string> next_;  // per queue: where to read on
  std::map<std::string, std::map<std::string, std::uint64_t>> counts_;
};

/// Tenants looked at per queue and partition (Inspector::tenants' most): the ready ones next to be
/// served and the waiting ones.
constexpr std::size_t kTenantsLookedAt = 10000;

/// The tenants of fair queues (docs/tenants.md), a series per tenant for a few, not for each of
/// thousands: per queue, streamq_tenants (how many of those looked at have work), and for the
/// `top` with the largest backlogs streamq_tenant_backlog and streamq_tenant_running.
class TenantGauges {
 public:
  explicit TenantGauges(std::size_t top) : top_(top) {}

  void read(Inspector& in, const std::string& queue) {
    if (top_ == 0) return;
    std::vector<TenantInfo> tenants = in.tenants(queue, kTenantsLookedAt);  // the largest backlog first
    const std::size_t with_work = tenants.size();
    if (tenants.size() > top_) tenants.resize(top_);
    queues_.push_back({queue, with_work, std::move(tenants)});
  }

  std::string exposition() const {
    if (top_ == 0) return {};
    const std::string most = std::to_string(kTenantsLookedAt);
    std::string text =
        "# HELP streamq_tenants Tenants that have work (a backlog, or waiting for a slot, a rate window or a "
        "resume), of at most " +
        most + " ready and " + most +
        " waiting looked at per partition.\n"
        "# TYPE streamq_tenants gauge\n";
    for (const Queue& q : queues_) {
      text += "streamq_tenants{stream=\"" + prometheus_label(q.name) + "\"} " + std::to_string(q.with_work) +
              "\n";
    }
    const std::string of_top =
        ", for the " + std::to_string(top_) + " tenants of the queue with the largest backlogs.";
    const auto family = [&](const std::string& name, const std::string& help, auto value) {
      text += "# HELP " + name + " " + help + of_top + "\n# TYPE " + name + " gauge\n";
      for (const Queue& q : queues_) {
        for (const TenantInfo& t : q.top) {
          text += name + "{stream=\"" + prometheus_label(q.name) + "\",tenant=\"" +
                  prometheus_label(t.tenant) + "\"} " + std::to_string(value(t)) + "\n";
        }
      }
    };
    family("streamq_tenant_backlog", "Tasks waiting in a tenant's backlog",
           [](const TenantInfo& t) { return t.backlog; });
    family("streamq_tenant_running",
           "A tenant's tasks in the queue's streams (dispatched, running, or held by a worker that died)",
           [](const TenantInfo& t) { return t.running; });
    return text;
  }

 private:
  struct Queue {
    std::string name;
    std::size_t with_work = 0;
    std::vector<TenantInfo> top;
  };
  std::size_t top_;
  std::vector<Queue> queues_;
};

/// The stored schedules of every queue (streamq::Schedules): per schedule, the seconds since its
/// last tick by the server's clock (TIME, read once per scrape), and whether it is paused; an
/// alert on the first finds a schedule that stopped. A schedule that has not ticked yet counts
/// from when it was stored.
class ScheduleGauges {
 public:
  explicit ScheduleGauges(ConnectionOptions connection) : connection_(std::move(connection)) {}

  /// Starts a scrape at the server's time `now_ms`.
  void begin(std::int64_t now_ms) {
    now_ = std::chrono::system_clock::time_point(std::chrono::milliseconds(now_ms));
    rows_.clear();
  }

  void read(const QueueInfo& q) {
    const int partitions = partitions_of(q);
    auto it = open_.find({q.name, partitions});
    if (it == open_.end()) {
      // One connection per queue, kept across scrapes; its clock is the scrape's server time.
      it = open_
               .emplace(std::pair{q.name, partitions},
                        queue_schedules(connection_, q.name, partitions, [this] { return now_; }))
               .first;
    }
    for (const ScheduleInfo& s : it->second.list(0)) {
      const auto since = s.last_tick ? *s.last_tick : s.changed_at;
      if (since == std::chrono::system_clock::time_point{}) continue;
      rows_.push_back({q.name, s.name, std::chrono::duration<double>(now_ - since).count(), s.paused});
    }
  }

  std::string exposition() const {
    std::string text =
        "# HELP streamq_schedule_seconds_since_last_tick Seconds since a stored schedule's last tick (since "
        "it was stored, before its first), by the server's clock.\n"
        "# TYPE streamq_schedule_seconds_since_last_tick gauge\n";
    for (const Row& r : rows_) {
      char value[64];
      std::snprintf(value, sizeof value, "%.3f", r.seconds);
      text += "streamq_schedule_seconds_since_last_tick" + labels(r) + " " + value + "\n";
    }
    text +=
        "# HELP streamq_schedule_paused Whether a stored schedule is paused (1) or running (0).\n"
        "# TYPE streamq_schedule_paused gauge\n";
    for (const Row& r : rows_) text += "streamq_schedule_paused" + labels(r) + (r.paused ? " 1\n" : " 0\n");
    return text;
  }

 private:
  struct Row {
    std::string queue, schedule;
    double seconds = 0;
    bool paused = false;
  };
  static std::string labels(const Row& r) {
    return "{stream=\"" + prometheus_label(r.queue) + "\",schedule=\"" + prometheus_label(r.schedule) + "\"}";
  }

  ConnectionOptions connection_;
  std::chrono::system_clock::time_point now_{};
  std::map<std::pair<std::string, int>, Schedules> open_;
  std::vector<Row> rows_;
};

/// Serves GET /metrics until SIGINT/SIGTERM: every discovered queue's exposition (one family
/// each), the `top_tenants` tenants of each with the largest backlogs, its stored schedules, streamq_up (0
/// when Redis could not be read) and streamq_scrape_duration_seconds. Returns an exit status.
int serve_exporter(const InspectorOptions& inspector_options, const std::string& listen,
                   std::size_t top_tenants) {
  const auto [host, port] = split_listen(listen);
  if (port == 0) {
    std::cerr << "streamq exporter: --listen must be host:port (got \"" << listen << "\")\n";
    return usage;
  }
  Inspector inspector(inspector_options);
  std::mutex mutex;  // one Inspector, one connection: scrapes take turns
  EventCounter events;
  ScheduleGauges schedules(inspector_options.connection);
  httplib::Server server;
  if (is_loopback(host)) {
    // On a loopback address a browser on this machine can reach it: a web page whose name was
    // made to resolve to 127.0.0.1 would read /metrics (queue names, counts). Its requests
    // carry its own name as Host: answered only to this server's loopback names.
    server.set_pre_routing_handler(
        [hosts = LoopbackHosts(host, port)](const httplib::Request& req, httplib::Response& res) {
          if (hosts.allows(req.get_header_value("Host"))) return httplib::Server::HandlerResponse::Unhandled;
          res.status = 403;
          res.set_content(std::string("streamq exporter: ") + LoopbackHosts::why() + "\n",
                          "text/plain; charset=utf-8");
          return httplib::Server::HandlerResponse::Handled;
        });
  }
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mutex);
    const auto start = std::chrono::steady_clock::now();
    std::string text;
    int up = 1;
    try {
      std::vector<QueueStats> all;
      TenantGauges tenants(top_tenants);
      schedules.begin(inspector.server_time_ms());
      for (const QueueInfo& q : inspector.queues()) {
        all.push_back(inspector.stats(q.name));
        events.read(inspector, q.name);
        tenants.read(inspector, q.name);
        schedules.read(q);
      }
      text = to_prometheus(all) + events.exposition() + tenants.exposition() + schedules.exposition();
    } catch (const Error& e) {
      up = 0;
      text.clear();
      std::cerr << "streamq exporter: scrape failed: " << e.what() << "\n";
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char duration[64];
    std::snprintf(duration, sizeof duration, "%.6f", took);
    text +=
        "# HELP streamq_up Whether the last scrape could read Redis (1) or not (0).\n"
        "# TYPE streamq_up gauge\nstreamq_up " +
        std::to_string(up) +
        "\n"
        "# HELP streamq_scrape_duration_seconds How long reading every queue took.\n"
        "# TYPE streamq_scrape_duration_seconds gauge\nstreamq_scrape_duration_seconds " +
        std::string(duration) + "\n";
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("streamq exporter: metrics on /metrics\n", "text/plain; charset=utf-8");
  });
  return serve_until_interrupted(server, host, port, "exporter", "http://" + listen + "/metrics");
}

}  // namespace

void add_exporter(CLI::App& app, Context& ctx) {
  auto listen = std::make_shared<std::string>("127.0.0.1:9808");
  auto top_tenants = std::make_shared<std::size_t>(10);
  auto* sub = app.add_subcommand("exporter", "serve Prometheus metrics of every queue on /metrics");
  sub->add_option("--listen", *listen, "host:port")->capture_default_str();
  sub->add_option(
         "--top-tenants", *top_tenants,
         "series of the K tenants of each queue with the largest backlogs, of at most 10,000 ready and "
         "10,000 waiting looked at per partition (0: no tenant metrics)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  on_run(sub, ctx,
         [&ctx, listen, top_tenants] { return serve_exporter(ctx.inspector(), *listen, *top_tenants); });
}

}  // namespace streamq::cli
