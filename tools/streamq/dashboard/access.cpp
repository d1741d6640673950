// SPDX-License-Identifier: MIT
#include "dashboard/access.hpp"

#include <httplib.h>

#include <fstream>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

namespace streamq::cli::dashboard {
namespace {

using json = nlohmann::json;

constexpr const char* cookie_prefix = "streamq_dashboard_";

bool same_bytes(std::string_view a, std::string_view b) {  // in time independent of where they differ
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string random_hex(std::size_t bytes) {
  std::random_device device;  // /dev/urandom
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<unsigned>(device()) & 0xffU;
    out += digits[b >> 4];
    out += digits[b & 0xfU];
  }
  return out;
}

/// The token rules (docs/cli-and-dashboard.md): 16 to 256 characters a cookie can carry as they are.
std::optional<std::string> token_problem(const std::string& token) {
  if (token.size() < 16 || token.size() > 256) return "the token must be 16 to 256 characters long";
  for (const char c : token) {
    const bool fits = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      std::string_view("-._~+/=").find(c) != std::string_view::npos;
    if (!fits) return "the token may hold only letters, digits and - . _ ~ + / =";
  }
  return std::nullopt;
}

/// Every value of the cookie `name` in the request's Cookie headers (a page on another port of
/// the same host can set one of the same name too: each is checked).
std::vector<std::string> cookies(const httplib::Request& req, std::string_view name) {
  std::vector<std::string> values;
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  for (std::size_t h = 0, n = req.get_header_value_count("Cookie"); h < n; ++h) {
    const std::string header = req.get_header_value("Cookie", h);
    std::size_t at = 0;
    while (at < header.size()) {
      std::size_t end = header.find(';', at);
      if (end == std::string::npos) end = header.size();
      std::string_view part(header.data() + at, end - at);
      while (!part.empty() && blank(part.front())) part.remove_prefix(1);
      while (!part.empty() && blank(part.back())) part.remove_suffix(1);
      if (part.size() > name.size() && part.substr(0, name.size()) == name && part[name.size()] == '=') {
        values.emplace_back(part.substr(name.size() + 1));
      }
      at = end + 1;
    }
  }
  return values;
}

}  // namespace

std::optional<Token> choose_token(const std::string& token_option, const std::string& token_file,
                                  bool no_auth, const std::string& host) {
  if (!token_option.empty() && !token_file.empty()) {
    std::cerr << "streamq dashboard: give --token or --token-file, not both\n";
    return std::nullopt;
  }
  if (no_auth && (!token_option.empty() || !token_file.empty())) {
    std::cerr << "streamq dashboard: --no-auth serves without a token: give it, or a token, not both\n";
    return std::nullopt;
  }
  std::string token = token_option;
  if (!token_file.empty()) {
    std::ifstream file(token_file);
    if (!file || !std::getline(file, token)) {
      std::cerr << "streamq dashboard: cannot read a token from " << token_file << "\n";
      return std::nullopt;
    }
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
    // An empty first line must not turn the token off (on loopback it would serve without one).
    if (token.empty()) {
      std::cerr << "streamq dashboard: the first line of " << token_file << " holds no token\n";
      return std::nullopt;
    }
  }
  if (!token.empty()) {
    if (const auto problem = token_problem(token)) {
      std::cerr << "streamq dashboard: " << *problem << "\n";
      return std::nullopt;
    }
  } else if (no_auth && !is_loopback(host)) {
    std::cerr << "streamq dashboard: " << host
              << " is not a loopback address; anyone who can reach it could replay and delete tasks. "
                 "--no-auth is for loopback only: give --token or --token-file\n";
    return std::nullopt;
  }
  // Neither a token nor --no-auth: a token of this run's own, shown once in the URL the server
  // prints (any local process could use a dashboard without one: every page holds its CSRF
  // token). A token given on the command line is visible to other users in `ps`.
  const bool generated = token.empty() && !no_auth;
  if (generated) token = random_hex(16);
  return Token{.value = token, .generated = generated};
}

Access::Access(std::string token, const std::string& host, int port)
    : token_(std::move(token)),
      csrf_(random_hex(32)),
      cookie_(std::string(cookie_prefix) + std::to_string(port)),
      hosts_(host, port) {}

bool Access::token_matches(std::string_view given) const { return has_token() && same_bytes(given, token_); }

std::string Access::open_session() {
  std::string id = random_hex(32);
  std::lock_guard lock(mutex_);
  sessions_.push_back(id);
  if (sessions_.size() > 1000) sessions_.erase(sessions_.begin());  // the oldest logins go first
  return cookie_ + "=" + id + "; Path=/; HttpOnly; SameSite=Strict";
}

bool Access::admit(const httplib::Request& req, httplib::Response& res) {
  if (!has_token()) {
    // Loopback without a token (--no-auth): a page of another site that got its name to
    // resolve to 127.0.0.1 still sends its own Host; refuse it.
    if (!hosts_.allows(req.get_header_value("Host"))) {
      refuse(res, 403, std::string("without a token, ") + LoopbackHosts::why());
      return false;
    }
    return true;
  }
  if (req.path == "/login" || req.path.rfind("/static/", 0) == 0) return true;
  // The URL printed at start carries the token once: a page opened with it logs in (a
  // session cookie) and is sent on without it, so it leaves no trace in the address bar.
  if (req.method == "GET" && req.path.rfind("/api/", 0) != 0 && req.has_param("token")) {
    if (!token_matches(req.get_param_value("token"))) {
      res.set_redirect("/login", 303);
      return false;
    }
    res.set_header("Set-Cookie", open_session());
    res.set_redirect(req.path, 303);
    return false;
  }
  const std::string auth = req.get_header_value("Authorization");
  if ((auth.rfind("Bearer ", 0) == 0 && token_matches(std::string_view(auth).substr(7))) ||
      has_session(req)) {
    return true;
  }
  if (req.path.rfind("/api/", 0) == 0) {
    refuse(res, 401, "a token is needed: log in on /login, or send Authorization: Bearer <token>");
  } else {
    res.set_redirect("/login", 303);
  }
  return false;
}

bool Access::action_allowed(const httplib::Request& req, httplib::Response& res) const {
  if (!same_bytes(req.get_header_value("X-CSRF-Token"), csrf_)) {
    refuse(res, 403, "missing or wrong X-CSRF-Token (reload the page)");
    return false;
  }
  if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
    refuse(res, 415, "actions take a JSON body (Content-Type: application/json)");
    return false;
  }
  if (!same_origin(req)) {
    refuse(res, 403, "cross-origin request refused");
    return false;
  }
  return true;
}

bool Access::same_origin(const httplib::Request& req) {
  const std::string origin = req.get_header_value("Origin");
  const std::string host = req.get_header_value("Host");
  if (!origin.empty() && origin != "http://" + host && origin != "https://" + host) return false;
  const std::string site = req.get_header_value("Sec-Fetch-Site");
  return site.empty() || site == "same-origin" || site == "none";
}

void Access::refuse(httplib::Response& res, int status, const std::string& why) {
  res.status = status;
  // The text may quote what the request held (a queue name), in any bytes: not valid UTF-8
  // must not turn a refusal into a failure of the refusal itself.
  res.set_content(json{{"error", why}}.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

bool Access::has_session(const httplib::Request& req) const {
  const std::vector<std::string> given = cookies(req, cookie_);
  std::lock_guard lock(mutex_);
  for (const std::string& value : given) {
    for (const std::string& id : sessions_) {
      if (same_bytes(value, id)) return true;
    }
  }
  return false;
}

}  // namespace streamq::cli::dashboard
