// SPDX-License-Identifier: MIT
// What the HTTP faces of the streamq command (cpp-httplib) share: the Prometheus exporter
// (commands/exporter.cpp) and the web dashboard (dashboard/): parsing --listen, the Host
// headers a loopback server answers to, serving until Ctrl-C.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace httplib {
class Server;
}

namespace streamq::cli {

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
