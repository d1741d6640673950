// SPDX-License-Identifier: MIT
#include <algorithm>
#include <thread>

#include "cluster_router.hpp"
#include "error_code.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

/// How often one command() follows a redirection or retries TRYAGAIN before it returns the
/// error reply to the caller.
constexpr int kMaxRedirects = 5;

bool is_command(const Argv& argv, std::string_view name) noexcept {
  if (argv.size() == 0 || argv[0].size() != name.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = argv[0][i];
    if ((c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c) != name[i]) return false;
  }
  return true;
}

}  // namespace

ClusterRouter::ClusterRouter(const ConnectionConfig& config) : config_(config) {
  if (!config_.route_key.empty()) route_slot_ = key_slot(config_.route_key);
}

template <class F>
auto ClusterRouter::guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    // Replies owed on the other masters' connections can no longer be matched to their
    // commands: everything is dropped, and the slot map is read again before the next command.
    drop();
    stale_ = true;
    throw;
  }
}

void ClusterRouter::sent_on(Connection* link) {
  for (std::vector<Connection*>* links : {&sent_since_wait_, &written_}) {
    if (std::find(links->begin(), links->end(), link) == links->end()) links->push_back(link);
  }
}

std::string ClusterRouter::describe() const {
  return home_ != nullptr ? "cluster node " + home_->describe() : config_.endpoint.describe();
}

void ClusterRouter::for_each_master(const std::function<void(Connection&)>& visit) {
  guarded([&] {
    if (owed_.empty()) refresh();
    const std::vector<HostPort> masters = map_.masters;
    for (const HostPort& m : masters) {
      Connection& link = link_to(m);
      ensure(link);
      visit(link);
    }
    return 0;
  });
}

Reply ClusterRouter::command_here(const Argv& argv) {
  if (home_ == nullptr) {
    throw ConnectionError("redis " + describe() + ": the connection that sent the previous command is gone");
  }
  return guarded([&] { return home_->command_here(argv); });
}

Connection* ClusterRouter::written_link_of(std::string_view key) const {
  const HostPort* master = map_.master_of(key_slot(key));
  if (master == nullptr) return nullptr;
  for (Connection* link : written_) {
    for (const auto& [at, owned] : links_) {
      if (owned.get() == link && at == *master) return link;
    }
  }
  return nullptr;
}

std::vector<Reply> ClusterRouter::wait_where_sent(const Argv& wait,
                                                  const std::vector<std::string>& written_keys) {
  return guarded([&] {
    std::vector<Connection*> sent = std::move(sent_since_wait_);
    sent_since_wait_.clear();
    const auto add = [&](Connection* link) {
      if (std::find(sent.begin(), sent.end(), link) == sent.end()) sent.push_back(link);
    };
    // Threads that share the connection share its WAITs: another caller's may have come after
    // this caller's writes and taken their masters from sent_since_wait_ (it covered them, but
    // what it found was its own caller's). So the masters of the keys this caller wrote are
    // asked too; a key whose master carried nothing (the slot moved since), or no key at all
    // with nothing sent since the last WAIT, asks every master written to.
    bool every = written_keys.empty() && sent.empty();
    for (const std::string& key : written_keys) {
      Connection* link = written_link_of(key);
      if (link == nullptr) {
        every = true;
      } else {
        add(link);
      }
    }
    if (every) {
      for (Connection* link : written_) add(link);
    }
    for (Connection* link : sent) {
      if (!link->connected()) {
        throw ConnectionError("redis " + link->describe() +
                              ": the connection that sent the previous command is gone");
      }
    }
    for (Connection* link : sent) link->append(wait);
    for (Connection* link : sent) link->flush();
    std::vector<Reply> replies;
    replies.reserve(sent.size());
    for (Connection* link : sent) replies.push_back(link->read_reply());
    return replies;
  });
}

void ClusterRouter::drop() noexcept {
  for (auto& [node, link] : links_) link->disconnect();
  owed_.clear();
  multi_waiting_ = false;
  in_multi_ = nullptr;
  sent_since_wait_.clear();
  written_.clear();
}

bool ClusterRouter::connected() const noexcept {
  if (home_ == nullptr || !home_->connected()) return false;
  if (route_slot_ < 0) return true;
  const HostPort* master = map_.master_of(route_slot_);
  return master != nullptr && home_->config().endpoint.host == master->host &&
         home_->config().endpoint.port == master->port;
}

Connection& ClusterRouter::link_to(const HostPort& node) {
  for (auto& [at, link] : links_) {
    if (at == node) return *link;
  }
  ConnectionConfig nc = config_;
  nc.endpoint = Endpoint{};
  nc.endpoint.host = node.host;
  nc.endpoint.port = node.port;
  nc.endpoint.user = config_.endpoint.user;
  nc.endpoint.password = config_.endpoint.password;
  nc.route_key.clear();
  links_.emplace_back(node, std::make_unique<Connection>(std::move(nc)));
  return *links_.back().second;
}

void ClusterRouter::ensure(Connection& link) {
  if (link.connected()) return;
  link.connect();
  // generation() tells callers that the connection their state belongs to is a new one (the
  // fetcher replays its pending entries, CLIENT UNBLOCK needs the new id): the route key's
  // master's; without a route key, any.
  const HostPort* route = route_slot_ >= 0 ? map_.master_of(route_slot_) : nullptr;
  if (route == nullptr ||
      (link.config().endpoint.host == route->host && link.config().endpoint.port == route->port)) {
    generation_ += 1;
  }
}

void ClusterRouter::refresh() {
  // The masters known first (they are the likeliest to answer), then the URL's nodes.
  std::vector<HostPort> ask = map_.masters;
  for (const HostPort& seed : config_.endpoint.cluster_nodes) {
    if (std::find(ask.begin(), ask.end(), seed) == ask.end()) ask.push_back(seed);
  }
  std::string problems;
  std::string refusal;
  for (const HostPort& node : ask) {
    const auto note = [&](std::string_view why) {
      problems += (problems.empty() ? "" : "; ") + node.describe() + ": " + std::string(why);
    };
    try {
      Connection& link = link_to(node);
      const bool was_connected = link.connected();
      if (!was_connected) link.connect();  // only to ask: no generation of its own
      Reply reply = link.command(Argv{"CLUSTER", "SHARDS"});
      bool shards = true;
      if (reply.view().is_error() && !reply.view().error().starts_with("ERR This instance has cluster")) {
        reply = link.command(Argv{"CLUSTER", "SLOTS"});  // Redis < 7.0 has no CLUSTER SHARDS
        shards = false;
      }
      if (reply.view().is_error()) {
        const std::string_view error = reply.view().error();
        if (error.starts_with("ERR This instance has cluster support disabled")) {
          throw ConfigError(
              "connection.url: " + node.describe() +
              " is not a cluster node (cluster support disabled): use redis:// for a single server");
        }
        if (refusal.empty()) refusal = std::string(error) + " (from " + node.describe() + ")";
        note(error);
        continue;
      }
      SlotMap map =
          shards ? parse_cluster_shards(reply.view(), node) : parse_cluster_slots(reply.view(), node);
      if (map.empty()) {
        note("serves no slots (a cluster being created?)");
        continue;
      }
      // Connections to nodes that are no longer masters are dropped (nothing is owed now).
      for (auto& [at, link_at] : links_) {
        if (std::find(map.masters.begin(), map.masters.end(), at) == map.masters.end()) {
          link_at->disconnect();
          if (home_ == link_at.get()) home_ = nullptr;
        }
      }
      map_ = std::move(map);
      stale_ = false;
      // A connection made only to ask is not kept: each Connection of a worker would keep one
      // to the first node otherwise. (The next command there connects again, counted.)
      if (!was_connected && &link != home_) link.disconnect();
      return;
    } catch (const ReplyError& e) {  // AUTH refused
      if (refusal.empty()) refusal = std::string(e.what()) + " (from " + node.describe() + ")";
      note(e.what());
    } catch (const ConnectionError& e) {
      note(e.what());
    }
  }
  if (!refusal.empty()) throw ReplyError(refusal);
  throw ConnectionError("redis " + config_.endpoint.describe() + ": no node gave the slot map: " + problems);
}

Connection& ClusterRouter::link_for(int slot) {
  if (slot < 0) {
    if (home_ != nullptr) return *home_;
    slot = route_slot_;
  }
  // The map is read again only when nothing is owed: a link that owes replies cannot be asked.
  if (map_.empty() && owed_.empty()) refresh();
  if (map_.empty())
    throw ConnectionError("redis " + config_.endpoint.describe() + ": the slot map is not known yet");
  if (slot < 0) return link_to(map_.masters.front());
  if (map_.master_of(slot) == nullptr && owed_.empty()) refresh();
  const HostPort* master = map_.master_of(slot);
  if (master == nullptr) {
    stale_ = true;
    throw ConnectionError("redis " + config_.endpoint.describe() + ": no master serves slot " +
                          std::to_string(slot) + " now (a failover in progress?)");
  }
  return link_to(*master);
}

void ClusterRouter::connect() {
  guarded([&] {
    if ((stale_ || map_.empty()) && owed_.empty()) refresh();
    Connection& link = route_slot_ >= 0 ? link_for(route_slot_) : link_for(-1);
    const std::uint64_t before = generation_;
    ensure(link);
    // The queue's slot is served by another master now, one already connected for other keys:
    // still a new connection for the caller's state.
    if (route_slot_ >= 0 && route_link_ != nullptr && &link != route_link_ && generation_ == before) {
      generation_ += 1;
    }
    route_link_ = &link;
    home_ = &link;
    return 0;
  });
}

void ClusterRouter::append(const Argv& argv, bool reconnect_on_use) {
  if (is_command(argv, "MULTI") && in_multi_ == nullptr) {
    multi_waiting_ = true;  // sent with the next command, to that command's master
    return;
  }
  guarded([&] {
    if (stale_ && owed_.empty() && !multi_waiting_ && in_multi_ == nullptr) refresh();
    Connection& link = in_multi_ != nullptr ? *in_multi_ : link_for(command_slot(argv));
    if (!link.connected() && !reconnect_on_use) {
      throw ConnectionError("redis " + link.describe() + ": not connected (the slot moved to this master)");
    }
    ensure(link);
    if (multi_waiting_) {
      link.append(Argv{"MULTI"});
      owed_.push_back(&link);
      multi_waiting_ = false;
      in_multi_ = &link;
    }
    link.append(argv);
    owed_.push_back(&link);
    sent_on(&link);
    if (is_command(argv, "EXEC") || is_command(argv, "DISCARD")) in_multi_ = nullptr;
    home_ = &link;
    return 0;
  });
}

void ClusterRouter::flush() {
  guarded([&] {
    for (auto& [at, link] : links_) {
      if (link->owes_replies()) link->flush();
    }
    return 0;
  });
}

Reply ClusterRouter::read_reply() {
  if (owed_.empty()) {
    throw ConnectionError("redis " + describe() + ": a reply was read that no command is owed");
  }
  Connection* link = owed_.front();
  owed_.pop_front();
  Reply reply = guarded([&] { return link->read_reply(); });
  const ReplyView v = reply.view();
  if (v.is_error()) {
    if (auto redirect = parse_redirect(v.error()); redirect && !redirect->ask) {
      if (redirect->to.host.empty()) redirect->to.host = link->config().endpoint.host;
      map_.assign(redirect->slot, redirect->to);  // at once; the whole map once nothing is owed
      stale_ = true;
    } else if (error_code(v.error()) == "CLUSTERDOWN") {
      stale_ = true;
    }
  }
  return reply;
}

Reply ClusterRouter::command(const Argv& argv, bool reconnect_on_use) {
  if (!owed_.empty() || multi_waiting_ || in_multi_ != nullptr) {
    append(argv, reconnect_on_use);
    return read_reply();
  }
  for (int attempt = 1;; ++attempt) {
    append(argv, reconnect_on_use);
    Reply reply = read_reply();
    if (!reply.view().is_error() || attempt >= kMaxRedirects) return reply;
    const std::string_view error = reply.view().error();
    const auto redirect = parse_redirect(error);
    if (redirect && !redirect->ask) continue;  // the map now names the new master
    if (redirect) {
      // The slot is being migrated and this key is already on the importing node: this one
      // command goes there, after ASKING.
      HostPort to = redirect->to;
      if (to.host.empty() && home_ != nullptr) to.host = home_->config().endpoint.host;
      return guarded([&] {
        Connection& link = link_to(to);
        ensure(link);
        link.append(Argv{"ASKING"});
        link.append(argv);
        sent_on(&link);
        const Reply asking = link.read_reply();
        return link.read_reply();
      });
    }
    if (error_code(error) != "TRYAGAIN") return reply;
    // A multi-key command while a slot migrates, with some of its keys moved: wait a little.
    std::this_thread::sleep_for(Millis{10 << attempt});
  }
}

}  // namespace streamq::detail
