// SPDX-License-Identifier: MIT
// Connection with a redis+sentinel:// URL: finding the master, and noticing when it stopped
// being the master.
#include <charconv>
#include <chrono>

#include "connection.hpp"
#include "error_code.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {

bool is_demotion_error(std::string_view error) noexcept {
  const std::string_view code = error_code(error);
  return code == "READONLY" ||
         (code == "UNBLOCKED" && error.find("instance state changed") != std::string_view::npos) ||
         (code == "ERR" && error.find("WAIT cannot be used with replica") != std::string_view::npos);
}

HostPort Connection::ask_sentinels(Millis budget) {
  const Endpoint& ep = config_.endpoint;
  // One budget for the whole question, however many sentinels are down; each sentinel gets its
  // share of what is left, so a host that swallows packets cannot take all of it.
  const auto deadline = std::chrono::steady_clock::now() + budget;
  std::string problems;
  std::string refusal;  // the first error reply of a sentinel
  std::size_t unknown = 0;
  std::size_t asked = 0;
  for (std::size_t k = 0; k < ep.sentinels.size(); ++k) {
    const std::size_t i = (sentinel_first_ + k) % ep.sentinels.size();
    const HostPort& at = ep.sentinels[i];
    const auto note = [&](std::string_view why) {
      problems += (problems.empty() ? "" : "; ") + at.describe() + ": " + std::string(why);
    };
    const auto remaining = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    const Millis left{remaining.count() / static_cast<std::int64_t>(ep.sentinels.size() - k)};
    if (left.count() <= 0) {
      note("not asked (connect_timeout spent)");
      continue;
    }
    // The connection to the sentinel that answered last is kept for the next question.
    if (sentinel_ == nullptr || i != sentinel_first_) {
      ConnectionConfig sc = config_;
      sc.endpoint = Endpoint{};
      sc.endpoint.host = at.host;
      sc.endpoint.port = at.port;
      sc.endpoint.user = ep.sentinel_user;
      sc.endpoint.password = ep.sentinel_password;
      sentinel_ = std::make_unique<Connection>(std::move(sc));
    }
    sentinel_->config_.connect_timeout = left;
    sentinel_->config_.socket_timeout = left;  // this answer is part of connecting
    ++asked;
    try {
      if (sentinel_->connected()) sentinel_->set_timeout(left);
      const Reply r = sentinel_->command(Argv{"SENTINEL", "get-master-addr-by-name", ep.master_name});
      const ReplyView v = r.view();
      if (v.is_error()) {
        if (refusal.empty()) refusal = std::string(v.error()) + " (from sentinel " + at.describe() + ")";
        note(v.error());
      } else if (v.is_nil() || (v.is_array() && v.size() == 0)) {
        ++unknown;
        note("monitors no master named " + ep.master_name);
      } else if (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) {
        const std::string_view port = v[1].str();
        int number = 0;
        const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
        if (ec == std::errc() && end == port.data() + port.size() && number > 0 && number <= 65535) {
          sentinel_first_ = i;
          return HostPort{std::string(v[0].str()), number};
        }
        note("answered a port that is not a number");
      } else {
        note("answered SENTINEL get-master-addr-by-name with an unexpected reply");
      }
    } catch (const ReplyError& e) {  // AUTH refused
      if (refusal.empty()) refusal = std::string(e.what()) + " (from sentinel " + at.describe() + ")";
      note(e.what());
    } catch (const ConnectionError& e) {
      note(e.what());
    }
    sentinel_.reset();  // not kept: this sentinel did not answer
  }
  // Nobody answered: the next question starts with the next sentinel, not the silent one.
  sentinel_first_ = (sentinel_first_ + 1) % ep.sentinels.size();
  sentinel_.reset();
  if (!refusal.empty()) throw ReplyError(refusal);
  if (asked == ep.sentinels.size() && unknown == asked) {
    throw ConfigError("connection.url: no sentinel monitors a master named " + ep.master_name + " (" +
                      problems + ")");
  }
  throw ConnectionError("redis " + ep.describe() + ": no sentinel named the master: " + problems);
}

bool Connection::recheck_master() {
  if (ctx_ == nullptr || owed_ > 0 || !config_.endpoint.is_sentinel()) return false;
  if (std::chrono::steady_clock::now() < next_recheck_) return false;
  HostPort named;
  try {
    named = ask_sentinels(std::min(config_.connect_timeout, kSentinelRecheckBudget));
  } catch (const std::exception&) {
    // The sentinels cannot say now: keep the master this connection has, and ask less often.
    next_recheck_ = std::chrono::steady_clock::now() + kSentinelRecheckAfterFailure;
    return false;
  }
  next_recheck_ = std::chrono::steady_clock::now() + kSentinelRecheck;
  if (named == master_) return false;
  disconnect();  // a failover happened: connect() asks again and goes to the new master
  return true;
}

}  // namespace streamq::detail
