// SPDX-License-Identifier: MIT
#include "name_lock.hpp"

#include <cstdio>
#include <random>
#include <thread>

#include "error_code.hpp"
#include "log.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

constexpr int kLiveChecks = 3;
constexpr Millis kLiveCheckPause{100};

std::string random_token() {
  std::random_device rd;
  char text[33];
  std::snprintf(text, sizeof text, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return text;
}

/// The client id of a "<client id> <token>" value ("" when it has none).
std::string holder_id(const std::string& value) { return value.substr(0, value.find(' ')); }

/// The `key=` field of a CLIENT LIST line ("" when absent).
std::string client_field(std::string_view line, std::string_view key) {
  const std::string spaced = " " + std::string(line);
  const std::string pattern = " " + std::string(key) + "=";
  const std::size_t at = spaced.find(pattern);
  if (at == std::string::npos) return {};
  const std::size_t from = at + pattern.size();
  return spaced.substr(from, spaced.find_first_of(" \r\n", from) - from);
}

}  // namespace

NameLock::NameLock(Shared& shared, std::function<void()> on_lost)
    : s_(shared),
      key_(live_key(shared.keys().stream, shared.opt.group, shared.opt.consumer_name)),
      token_(random_token()),
      on_lost_(std::move(on_lost)) {}

std::string NameLock::value_for(const Connection& conn) const {
  return std::to_string(conn.client_id()) + " " + token_;
}

std::string NameLock::call(ScriptRunner& scripts, const char* mode, const std::string& value,
                           const std::string& found) {
  Argv argv = scripts.begin(ScriptId::name, 1);
  const std::string ttl = std::to_string(s_.opt.claim_min_idle.count());
  argv.add(key_).add(mode).add(token_).add(value).add(ttl).add(found);
  const Reply reply = scripts.call(ScriptId::name, argv);
  const ReplyView v = reply.view().check();
  return v.is_nil() ? std::string() : std::string(v.str());
}

void NameLock::claim(Connection& conn) {
  ScriptRunner scripts(conn);
  const std::string who =
      "consumer_name \"" + s_.opt.consumer_name + "\" (group " + s_.opt.group + " of " + s_.queue + ")";
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::string holder;
    try {
      holder = call(scripts, "hold", value_for(conn));
    } catch (const ReplyError& e) {
      if (error_code(e.what()) != "NOPERM") throw;
      log(LogLevel::warning, "cannot hold " + who + " in " + key_ + " (" + e.what() +
                                 "): a second process started with this name would not be refused; grant "
                                 "the consumer's ACL user ~" +
                                 s_.keys().stream + ":live:* and +client|list");
      return;
    }
    if (holder.empty()) {
      held_ = true;
      return;
    }
    const std::string id = holder_id(holder);
    // A process killed a moment ago may still be listed: the server sees its connection close
    // in the same event loop turn as this one's command, maybe after it. A live holder is
    // still there after kLiveChecks looks.
    std::string line;
    for (int look = 0; look < kLiveChecks; ++look) {
      if (look > 0) std::this_thread::sleep_for(kLiveCheckPause);
      const Reply listed = conn.command(Argv{"CLIENT", "LIST", "ID", id});
      const ReplyView v = listed.view();
      if (v.is_error()) {
        throw ConfigError(who + " is held by client " + id + ", which this user cannot look up (" +
                          std::string(v.error()) +
                          "): grant it +client|list, or wait until the name is free (claim_min_idle after "
                          "the holder's last renewal)");
      }
      line = v.is_string() ? std::string(v.str()) : std::string();
      if (line.find("id=") == std::string::npos) break;
    }
    if (line.find("id=") != std::string::npos) {
      throw ConfigError(who + " is in use by a live process (client " + id + " from " +
                        client_field(line, "addr") + ", named " + client_field(line, "name") +
                        "): give every worker process a name of its own, or leave consumer_name empty "
                        "for a unique one");
    }
    // The holder's connection is gone: its process crashed or was killed. A restart takes the
    // name at once, if nobody else took it meanwhile.
    if (call(scripts, "take", value_for(conn), holder).empty()) {
      log(LogLevel::info, who + ": the process that held it (client " + id + ") is gone; taking it over");
      held_ = true;
      return;
    }
  }
  throw ConfigError(who + " is being claimed by other processes at the same time");
}

void NameLock::tick(ScriptRunner& scripts, Clock::time_point now) {
  next_ = now + s_.opt.heartbeat_interval;
  if (!held_ || lost_.load()) return;
  Connection& conn = scripts.connection();
  if (!conn.connected()) conn.connect();
  const std::string holder = call(scripts, "hold", value_for(conn));
  if (holder.empty()) return;
  taken_by_ = holder_id(holder);
  lost_.store(true);
  log(LogLevel::error, lost_message() + "; stopping");
  on_lost_();
}

std::string NameLock::lost_message() const {
  return "consumer_name \"" + s_.opt.consumer_name + "\" (group " + s_.opt.group + " of " + s_.queue +
         ") was taken by another process (client " + taken_by_ +
         ") while this one could not renew it for claim_min_idle (stopped, or cut off from Redis)";
}

void NameLock::release(Connection& conn) noexcept {
  if (!held_ || lost_.load()) return;
  try {
    if (!conn.connected()) conn.connect();
    ScriptRunner scripts(conn);
    call(scripts, "drop", "");
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("stop: cannot free the consumer name (") + e.what() +
                               "); a restart under it still works at once, this process being gone");
  }
}

}  // namespace streamq::detail
