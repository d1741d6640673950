// SPDX-License-Identifier: MIT
// streamq dashboard: who may use it. Loopback only unless a token is given; with a token every
// request but the login page and the static files needs it (Authorization: Bearer, or the
// session cookie /login sets); without one, only a loopback Host header is accepted (a
// DNS-rebound name is refused). Every action is a POST that must carry the page's CSRF token in
// X-CSRF-Token, as JSON, from this origin.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve.hpp"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace streamq::cli::dashboard {

/// The token the dashboard asks for, from --token, --token-file, or none with --no-auth (on a
/// loopback `host` only); with none of them, a random token of this run (`generated`). Says on
/// stderr what is wrong, and gives nullopt, when the options do not fit together or the token
/// breaks the rules (docs/cli-and-dashboard.md).
struct Token {
  std::string value;  ///< empty: no token (--no-auth)
  bool generated = false;
};
std::optional<Token> choose_token(const std::string& token, const std::string& token_file, bool no_auth,
                                  const std::string& host);

class Access {
 public:
  /// `host`:`port` is where it listens; without a token, a Host header must name it or another
  /// loopback name, with that port (or none, for port 80).
  Access(std::string token, const std::string& host, int port);

  const std::string& csrf() const { return csrf_; }
  bool has_token() const { return !token_.empty(); }
  bool token_matches(std::string_view given) const;

  /// A new login: the cookie that carries it (a random session id, not the token, so that the
  /// token itself never sits in a browser's cookie jar).
  std::string open_session();

  /// The check every request passes first; answers the request itself when it fails.
  bool admit(const httplib::Request& req, httplib::Response& res);

  /// What an action must carry besides admission: JSON, the CSRF token, and this origin.
  bool action_allowed(const httplib::Request& req, httplib::Response& res) const;

  /// Origin (when sent) names this very host (by http, or by https through a TLS proxy);
  /// Sec-Fetch-Site (when sent) says same-origin.
  static bool same_origin(const httplib::Request& req);

  /// Answers `status` with {"error": why}.
  static void refuse(httplib::Response& res, int status, const std::string& why);

 private:
  bool has_session(const httplib::Request& req) const;

  std::string token_;
  std::string csrf_;
  std::string cookie_;  // streamq_dashboard_<port>: dashboards on other ports keep their own
  LoopbackHosts hosts_;
  mutable std::mutex mutex_;
  std::vector<std::string> sessions_;
};

}  // namespace streamq::cli::dashboard
