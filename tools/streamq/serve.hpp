// SPDX-License-Identifier: MIT
// The HTTP faces of the streamq command (cpp-httplib): the Prometheus exporter.
#pragma once

#include <string>

#include <streamq/inspector.hpp>

namespace streamq::cli {

struct ServeOptions {
  /// host:port to bind.
  std::string listen;
};

/// Serves GET /metrics until SIGINT/SIGTERM: every discovered queue's exposition (one family
/// each), streamq_up (0 when Redis could not be read) and streamq_scrape_duration_seconds.
/// Returns an exit status.
int serve_exporter(const InspectorOptions& inspector, const ServeOptions& options);

}  // namespace streamq::cli
