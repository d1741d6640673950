// SPDX-License-Identifier: MIT
// The HTTP faces of the streamq command (cpp-httplib): the Prometheus exporter and the web
// dashboard, and what they share (parsing --listen, serving until Ctrl-C).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <streamq/inspector.hpp>

namespace httplib {
class Server;
}

namespace streamq::cli {

struct DashboardOptions {
  /// host:port to bind; any host but a loopback one needs a token.
  std::string listen = "127.0.0.1:8080";
  /// The access token (--token), or a file whose first line is it (--token-file). Without
  /// either, a random token of this run, printed once in the URL (unless no_auth).
  std::string token;
  std::string token_file;
  /// --no-auth: no token (loopback only; only a loopback Host header is answered).
  bool no_auth = false;
  /// Seconds between the samples behind the charts (they cover the last hour).
  double sample_interval = 5.0;
};

/// Serves the web dashboard until SIGINT/SIGTERM. Returns an exit status (usage for a bad
/// --listen, token or interval).
int serve_dashboard(const InspectorOptions& inspector, const DashboardOptions& options);

/// "host:port" -> (host, port); port 0 when malformed. "[::1]:80" gives host "::1".
std::pair<std::string, int> split_listen(const std::string& listen);

/// A loopback address written as one (127.0.0.0/8, ::1) or "localhost"; a name is not resolved
/// (127.0.0.1.example.com is not loopback).
bool is_loopback(const std::string& host);

/// The Host headers a server on a loopback address answers to: its own address, 127.0.0.1,
/// localhost or [::1], with its port (or without, for port 80). A page of another site whose
/// name was made to resolve to 127.0.0.1 (DNS rebinding) still sends its own name, and is
/// refused; without this rule such a page could read what the server serves.
class LoopbackHosts {
 public:
  LoopbackHosts(const std::string& host, int port);
  bool allows(const std::string& host_header) const;
  /// The refusal's text.
  static const char* why();

 private:
  std::vector<std::string> hosts_;
};

/// Binds `server` to host:port and serves on a thread until SIGINT/SIGTERM (the `interrupted`
/// flag) or until the server ends; `what` names it in messages, `url` is printed once it
/// listens. Returns an exit status.
int serve_until_interrupted(httplib::Server& server, const std::string& host, int port,
                            const std::string& what, const std::string& url);

}  // namespace streamq::cli
