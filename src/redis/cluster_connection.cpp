// SPDX-License-Identifier: MIT
// Connection with a redis+cluster:// URL: one plain connection per master, each command routed
// by the slot of its first key, replies returned in the order the commands were appended.
#include <algorithm>
#include <thread>

#include "cluster.hpp"
#include "cluster_connection.hpp"
#include "connection.hpp"
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

void Connection::cluster_drop() noexcept {
  for (auto& [node, link] : cluster_->links) link->disconnect();
  cluster_->owed.clear();
  cluster_->multi_waiting = false;
  cluster_->in_multi = nullptr;
  cluster_->sent_since_wait.clear();
}

bool Connection::cluster_connected() const noexcept {
  const ClusterState& c = *cluster_;
  if (c.home == nullptr || !c.home->connected()) return false;
  if (c.route_slot < 0) return true;
  const HostPort* master = c.map.master_of(c.route_slot);
  return master != nullptr && c.home->config_.endpoint.host == master->host &&
         c.home->config_.endpoint.port == master->port;
}

Connection& Connection::cluster_link(const HostPort& node) {
  for (auto& [at, link] : cluster_->links) {
    if (at == node) return *link;
  }
  ConnectionConfig nc = config_;
  nc.endpoint = Endpoint{};
  nc.endpoint.host = node.host;
  nc.endpoint.port = node.port;
  nc.endpoint.user = config_.endpoint.user;
  nc.endpoint.password = config_.endpoint.password;
  nc.route_key.clear();
  cluster_->links.emplace_back(node, std::make_unique<Connection>(std::move(nc)));
  return *cluster_->links.back().second;
}

void Connection::cluster_ensure(Connection& link) {
  if (link.connected()) return;
  link.connect();
  // generation() tells callers that the connection their state belongs to is a new one (the
  // fetcher replays its pending entries, CLIENT UNBLOCK needs the new id): the route key's
  // master's; without a route key, any.
  const ClusterState& c = *cluster_;
  const HostPort* route = c.route_slot >= 0 ? c.map.master_of(c.route_slot) : nullptr;
  if (route == nullptr ||
      (link.config_.endpoint.host == route->host && link.config_.endpoint.port == route->port)) {
    generation_ += 1;
  }
}

void Connection::cluster_refresh() {
  ClusterState& c = *cluster_;
  // The masters known first (they are the likeliest to answer), then the URL's nodes.
  std::vector<HostPort> ask = c.map.masters;
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
      Connection& link = cluster_link(node);
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
      for (auto& [at, link_at] : c.links) {
        if (std::find(map.masters.begin(), map.masters.end(), at) == map.masters.end()) {
          link_at->disconnect();
          if (c.home == link_at.get()) c.home = nullptr;
        }
      }
      c.map = std::move(map);
      c.stale = false;
      // A connection made only to ask is not kept: each Connection of a worker would keep one
      // to the first node otherwise. (The next command there connects again, counted.)
      if (!was_connected && &link != c.home) link.disconnect();
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

Connection& Connection::cluster_link_for(int slot) {
  ClusterState& c = *cluster_;
  if (slot < 0) {
    if (c.home != nullptr) return *c.home;
    slot = c.route_slot;
  }
  // The map is read again only when nothing is owed: a link that owes replies cannot be asked.
  if (c.map.empty() && c.owed.empty()) cluster_refresh();
  if (c.map.empty())
    throw ConnectionError("redis " + config_.endpoint.describe() + ": the slot map is not known yet");
  if (slot < 0) return cluster_link(c.map.masters.front());
  if (c.map.master_of(slot) == nullptr && c.owed.empty()) cluster_refresh();
  const HostPort* master = c.map.master_of(slot);
  if (master == nullptr) {
    c.stale = true;
    throw ConnectionError("redis " + config_.endpoint.describe() + ": no master serves slot " +
                          std::to_string(slot) + " now (a failover in progress?)");
  }
  return cluster_link(*master);
}

void Connection::cluster_connect() {
  backoff_.fail();  // until a master's connection is set up
  cluster_guarded([&] {
    ClusterState& c = *cluster_;
    if ((c.stale || c.map.empty()) && c.owed.empty()) cluster_refresh();
    Connection& link = c.route_slot >= 0 ? cluster_link_for(c.route_slot) : cluster_link_for(-1);
    const std::uint64_t before = generation_;
    cluster_ensure(link);
    // The queue's slot is served by another master now, one already connected for other keys:
    // still a new connection for the caller's state.
    if (c.route_slot >= 0 && c.route_link != nullptr && &link != c.route_link && generation_ == before) {
      generation_ += 1;
    }
    c.route_link = &link;
    c.home = &link;
    return 0;
  });
  backoff_.reset();
}

void Connection::cluster_append(const Argv& argv) {
  ClusterState& c = *cluster_;
  if (is_command(argv, "MULTI") && c.in_multi == nullptr) {
    c.multi_waiting = true;  // sent with the next command, to that command's master
    return;
  }
  cluster_guarded([&] {
    if (c.stale && c.owed.empty() && !c.multi_waiting && c.in_multi == nullptr) cluster_refresh();
    Connection& link = c.in_multi != nullptr ? *c.in_multi : cluster_link_for(command_slot(argv));
    if (!link.connected() && !reconnect_on_use_) {
      throw ConnectionError("redis " + link.describe() + ": not connected (the slot moved to this master)");
    }
    cluster_ensure(link);
    if (c.multi_waiting) {
      link.append(Argv{"MULTI"});
      c.owed.push_back(&link);
      c.multi_waiting = false;
      c.in_multi = &link;
    }
    link.append(argv);
    c.owed.push_back(&link);
    c.sent_on(&link);
    if (is_command(argv, "EXEC") || is_command(argv, "DISCARD")) c.in_multi = nullptr;
    c.home = &link;
    return 0;
  });
}

void Connection::cluster_flush() {
  cluster_guarded([&] {
    for (auto& [at, link] : cluster_->links) {
      if (link->owed_ > 0) link->flush();
    }
    return 0;
  });
}

Reply Connection::cluster_read_reply() {
  ClusterState& c = *cluster_;
  if (c.owed.empty()) {
    throw ConnectionError("redis " + describe() + ": a reply was read that no command is owed");
  }
  Connection* link = c.owed.front();
  c.owed.pop_front();
  Reply reply = cluster_guarded([&] { return link->read_reply(); });
  const ReplyView v = reply.view();
  if (v.is_error()) {
    if (auto redirect = parse_redirect(v.error()); redirect && !redirect->ask) {
      if (redirect->to.host.empty()) redirect->to.host = link->config_.endpoint.host;
      c.map.assign(redirect->slot, redirect->to);  // at once; the whole map once nothing is owed
      c.stale = true;
    } else if (error_code(v.error()) == "CLUSTERDOWN") {
      c.stale = true;
    }
  }
  return reply;
}

Reply Connection::cluster_command(const Argv& argv) {
  ClusterState& c = *cluster_;
  if (!c.owed.empty() || c.multi_waiting || c.in_multi != nullptr) {
    cluster_append(argv);
    return cluster_read_reply();
  }
  for (int attempt = 1;; ++attempt) {
    cluster_append(argv);
    Reply reply = cluster_read_reply();
    if (!reply.view().is_error() || attempt >= kMaxRedirects) return reply;
    const std::string_view error = reply.view().error();
    const auto redirect = parse_redirect(error);
    if (redirect && !redirect->ask) continue;  // the map now names the new master
    if (redirect) {
      // The slot is being migrated and this key is already on the importing node: this one
      // command goes there, after ASKING.
      HostPort to = redirect->to;
      if (to.host.empty() && c.home != nullptr) to.host = c.home->config_.endpoint.host;
      return cluster_guarded([&] {
        Connection& link = cluster_link(to);
        cluster_ensure(link);
        link.append(Argv{"ASKING"});
        link.append(argv);
        c.sent_on(&link);
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
