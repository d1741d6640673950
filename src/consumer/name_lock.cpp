// SPDX-License-Identifier: MIT
#include "name_lock.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "log.hpp"
#include "options.hpp"
#include "redis/error_code.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

constexpr int kLiveChecks = 3;
constexpr Millis kLiveCheckPause{100};
// The most "<host>-<n>" names a consumer given none looks at.
constexpr int kMostSlots = 128;

std::string random_token() {
  std::random_device rd;
  char text[33];
  std::snprintf(text, sizeof text, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return text;
}

}  // namespace

NameLock::NameLock(Shared& shared, std::function<void()> on_lost)
    : s_(shared),
      chosen_here_(shared.opt.consumer_name.empty()),
      unique_name_(shared.consumer_name),
      key_(live_key(shared.keys().stream, shared.opt.group, shared.consumer_name)),
      token_(random_token()),
      on_lost_(std::move(on_lost)) {}

std::string NameLock::who() const {
  return "consumer_name \"" + s_.consumer_name + "\" (group " + s_.opt.group + " of " + s_.queue + ")";
}

void NameLock::rename(std::string name) {
  s_.consumer_name = std::move(name);
  key_ = live_key(s_.keys().stream, s_.opt.group, s_.consumer_name);
}

std::optional<NameLock::Holder> NameLock::call(ScriptRunner& scripts, const char* mode,
                                               const std::string& found) {
  Argv argv = scripts.begin(ScriptId::name, 1);
  const std::string id = std::to_string(scripts.connection().client_id());
  const std::string ttl = std::to_string(s_.opt.claim_min_idle.count());
  argv.add(key_).add(mode).add(token_).add(id).add(ttl).add(found);
  const Reply reply = scripts.call(ScriptId::name, argv);
  const ReplyView v = reply.view().check();
  if (v.is_nil()) return std::nullopt;
  return Holder{std::string(v[0].str()), v[1].integer()};
}

void NameLock::claim(Connection& conn) {
  try {
    if (chosen_here_) {
      claim_free_slot(conn);
    } else {
      try_claim(conn);
    }
  } catch (const ReplyError& e) {
    // A full server (OOM) refuses the write; a queue must still drain then, so the consumer
    // starts, and takes its name once the server takes writes again.
    if (!is_transient_error(e.what())) throw;
    if (chosen_here_) rename(unique_name_);
    claim_pending_ = true;
    log(LogLevel::warning, "cannot hold " + who() + " now (" + e.what() +
                               "): starting without it, and taking it when the server allows");
  }
}

void NameLock::try_claim(Connection& conn) {
  switch (try_take(conn, false)) {
    case Take::taken: return;
    case Take::unknown:
      log(LogLevel::warning, "cannot hold " + who() + " in " + key_ + " (" + unknown_why_ +
                                 "): a second process started with this name would not be refused; grant "
                                 "the consumer's ACL user ~" +
                                 s_.keys().stream + ":live:* and +client|list");
      return;
    case Take::in_use:
      throw ConfigError(who() + " is in use by a live process (" + live_client_ +
                        "): give every worker process a name of its own, or leave consumer_name empty for "
                        "one chosen per host");
    case Take::contended: break;
  }
  throw ConfigError(who() + " is being claimed by other processes at the same time");
}

void NameLock::claim_free_slot(Connection& conn) {
  if (held_) {
    // A start tried again (its connection failed after the name was taken): the same name,
    // not a lower one freed meanwhile, which would leave this one held until it expires.
    try_claim(conn);
    return;
  }
  const std::string host = host_name();
  const auto unknown = [&] {
    rename(unique_name_);
    log(LogLevel::warning, "consumer_name left empty, and which of " + host +
                               "-<n> are free cannot be told (" + unknown_why_ + "): running as \"" +
                               unique_name_ +
                               "\", so a restart waits claim_min_idle for this worker's tasks; grant the "
                               "consumer's ACL user ~" +
                               s_.keys().stream + ":live:* and +client|list, or set consumer_name");
    try_claim(conn);
  };
  const std::optional<std::vector<std::string>> names = free_slots(conn, host);
  if (!names) return unknown();
  for (const std::string& name : *names) {
    rename(name);
    switch (try_take(conn, true)) {
      case Take::taken: return;
      case Take::in_use:  // (another process took it since the pass)
      case Take::contended: continue;
      case Take::unknown: return unknown();
    }
  }
  rename(unique_name_);
  log(LogLevel::warning, "consumer_name left empty, and " + host + "-1 to " + host + "-" +
                             std::to_string(kMostSlots) + " are all held by live processes: running as \"" +
                             unique_name_ + "\"");
  try_claim(conn);
}

std::optional<std::vector<std::string>> NameLock::free_slots(Connection& conn, const std::string& host) {
  std::vector<std::string> keys;  // the argvs' strings
  std::vector<Argv> argvs;
  keys.reserve(kMostSlots);
  for (int n = 1; n <= kMostSlots; ++n) {
    keys.push_back(live_key(s_.keys().stream, s_.opt.group, host + "-" + std::to_string(n)));
    argvs.push_back(Argv{"GET", keys.back()});
  }
  argvs.push_back(Argv{"TIME"});
  const std::vector<Reply> replies = conn.pipeline(argvs);
  const ReplyView time = replies.back().view().check();
  const std::int64_t now_ms = time[0].as_int() * 1000 + time[1].as_int() / 1000;
  // The names held up to the lowest one nobody holds: the candidates below it.
  std::vector<int> held;
  std::vector<NameHolder> holders;
  int first_free = kMostSlots;
  for (int i = 0; i < kMostSlots; ++i) {
    const ReplyView v = replies[static_cast<std::size_t>(i)].view();
    if (v.is_error()) {
      if (error_code(v.error()) != "NOPERM") v.check();
      unknown_why_ = std::string(v.error());
      return std::nullopt;
    }
    if (v.is_nil()) {
      first_free = i;
      break;
    }
    // (A value streamq did not write holds nothing: the name is a candidate.)
    if (std::optional<NameHolder> h = parse_name_holder(v.str())) {
      held.push_back(i);
      holders.push_back(std::move(*h));
    }
  }
  const std::vector<HolderLook> looks = look_until_sure(conn, holders, now_ms);
  std::vector<bool> live(kMostSlots, false);
  for (std::size_t k = 0; k < looks.size(); ++k) {
    if (looks[k].state == HolderLook::State::unknown) return std::nullopt;
    live[static_cast<std::size_t>(held[k])] = looks[k].state == HolderLook::State::live;
  }
  std::vector<std::string> names;
  for (int i = 0; i < kMostSlots; ++i) {
    if (i >= first_free || !live[static_cast<std::size_t>(i)])
      names.push_back(host + "-" + std::to_string(i + 1));
  }
  return names;
}

NameLock::Take NameLock::try_take(Connection& conn, bool must_know) {
  ScriptRunner scripts(conn);
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::optional<Holder> holder;
    try {
      holder = call(scripts, "hold");
    } catch (const ReplyError& e) {
      if (error_code(e.what()) != "NOPERM") throw;
      unknown_why_ = e.what();
      return Take::unknown;
    }
    if (!holder) {
      held_ = true;
      return Take::taken;
    }
    // (A value streamq did not write holds nothing: taken over as a gone holder's.)
    const std::optional<NameHolder> parsed = parse_name_holder(holder->value);
    const std::string id = parsed ? parsed->client_id : holder->value.substr(0, holder->value.find(' '));
    switch (parsed ? look_until_sure(conn, {*parsed}, holder->now_ms).front().state
                   : HolderLook::State::gone) {
      case HolderLook::State::live: return Take::in_use;
      case HolderLook::State::unknown:
        if (must_know) return Take::unknown;
        log(LogLevel::warning,
            who() + " is held by client " + id + ", which this user may not look up (" + unknown_why_ +
                "): taking the name without knowing whether that process still runs; grant "
                "the consumer's ACL user +client|list");
        break;
      case HolderLook::State::gone: break;
    }
    // Its process crashed or was killed (the server closed its connection): a restart takes
    // the name at once, if nobody else took it meanwhile.
    if (!call(scripts, "take", holder->value)) {
      log(LogLevel::info, who() + ": the process that held it (client " + id + ") is gone; taking it over");
      held_ = true;
      return Take::taken;
    }
  }
  return Take::contended;
}

std::vector<HolderLook> NameLock::look_until_sure(Connection& conn, const std::vector<NameHolder>& holders,
                                                  std::int64_t now_ms) {
  std::vector<HolderLook> looks = look_at_holders(conn, holders, now_ms, &unknown_why_);
  // A process killed a moment ago may still be listed: the server sees its connection close in
  // the same event loop turn as this one's command, maybe after it. A live holder is still
  // there after kLiveChecks looks. Only the holders below the lowest one gone matter (a consumer
  // given no name takes the lowest free name), and they are looked at again all at once.
  for (int look = 1; look < kLiveChecks; ++look) {
    const auto live_below =
        std::find_if(looks.begin(), looks.end(),
                     [](const HolderLook& l) { return l.state != HolderLook::State::live; }) -
        looks.begin();
    if (live_below == 0) break;
    std::this_thread::sleep_for(kLiveCheckPause);
    const std::vector<NameHolder> again(holders.begin(), holders.begin() + live_below);
    const std::vector<HolderLook> next = look_at_holders(conn, again, now_ms, &unknown_why_);
    std::copy(next.begin(), next.end(), looks.begin());
  }
  for (const HolderLook& l : looks) {
    if (l.state == HolderLook::State::live) {
      live_client_ = l.client;
      break;
    }
  }
  return looks;
}

void NameLock::tick(ScriptRunner& scripts, Clock::time_point now) {
  next_ = now + s_.opt.heartbeat_interval;
  if (lost_.load() || (!held_ && !claim_pending_)) return;
  Connection& conn = scripts.connection();
  if (!conn.connected()) conn.connect();
  try {
    if (claim_pending_) {
      try_claim(conn);  // ConfigError when a live process has the name by now
      claim_pending_ = false;
      if (held_) log(LogLevel::info, who() + " held now");
      return;
    }
    const std::optional<Holder> holder = call(scripts, "hold");
    if (!holder) {
      full_logged_ = false;
      return;
    }
    lose(who() + " was taken by another process (client " + holder->value.substr(0, holder->value.find(' ')) +
         ") while this one could not renew it for claim_min_idle (stopped, or cut off from Redis)");
  } catch (const ConfigError& e) {
    lose(e.what());
  } catch (const ReplyError& e) {
    // A full server refuses the renewal: never a reason to stop renewing the leases (the duties
    // after this one), nor to stop this consumer, which frees memory by acknowledging.
    if (!is_transient_error(e.what())) throw;
    if (!std::exchange(full_logged_, true)) {
      log(LogLevel::warning, std::string("cannot renew the consumer name (") + e.what() + "); trying again");
    }
  }
}

void NameLock::lose(std::string why) {
  lost_reason_ = std::move(why);
  lost_.store(true);
  log(LogLevel::error, lost_reason_ + "; stopping");
  on_lost_();
}

void NameLock::release(Connection& conn) noexcept {
  if (!held_ || lost_.load()) return;
  try {
    if (!conn.connected()) conn.connect();
    ScriptRunner scripts(conn);
    call(scripts, "drop");
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("stop: cannot free the consumer name (") + e.what() +
                               "); a restart under it still works at once, this process being gone");
  }
}

}  // namespace streamq::detail
