// SPDX-License-Identifier: MIT
// The routing of a Connection made with a redis+cluster:// URL (see Connection): one plain
// connection per master, each command routed by the slot of its first key, replies returned in
// the order the commands were appended.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cluster.hpp"
#include "connection.hpp"

namespace streamq::detail {

class ClusterRouter {
 public:
  /// `config` is the cluster URL's: its nodes are asked for the slot map, its user and
  /// password and timeouts are every master's, its route_key names the queue's slot.
  explicit ClusterRouter(const ConnectionConfig& config);

  /// Connects to the master of the route key's slot (without one: the first master), reading
  /// the slot map first when it is stale.
  void connect();
  /// Whether the connection to the route key's master (or, without one, the last used) is up.
  bool connected() const noexcept;
  /// Drops every master's connection and what was owed on them.
  void drop() noexcept;

  void append(const Argv& argv, bool reconnect_on_use);
  void flush();
  Reply read_reply();
  /// One command, following MOVED and ASK and retrying TRYAGAIN (when nothing else is owed).
  Reply command(const Argv& argv, bool reconnect_on_use);
  /// On the connection that sent the previous command, without reconnecting.
  Reply command_here(const Argv& argv);
  /// See Connection::wait_where_sent.
  std::vector<Reply> wait_where_sent(const Argv& wait, const std::vector<std::string>& written_keys);
  /// `visit` with each master's connection (the slot map read again first).
  void for_each_master(const std::function<void(Connection&)>& visit);

  /// Incremented by a connect to the route key's master and when the route key's slot moved
  /// to another master (without a route key: by any master's connect).
  std::uint64_t generation() const noexcept { return generation_; }
  std::int64_t client_id() const noexcept { return home_ != nullptr ? home_->client_id() : -1; }
  /// "cluster node <address>" of the master used last, or the URL's description.
  std::string describe() const;

 private:
  void refresh();
  Connection& link_to(const HostPort& node);
  Connection& link_for(int slot);
  void ensure(Connection& link);
  void sent_on(Connection* link);
  /// The link of the master that serves `key` now, if it carried a command since the last
  /// drop(); null otherwise (not known, or the slot moved since).
  Connection* written_link_of(std::string_view key) const;
  template <class F>
  auto guarded(F&& f) -> decltype(f());

  ConnectionConfig config_;
  std::uint64_t generation_ = 0;
  SlotMap map_;
  bool stale_ = true;  // read the slot map again before the next command, once nothing is owed
  // One plain connection per master (and per node an ASK sent us to), created when first used.
  std::vector<std::pair<HostPort, std::unique_ptr<Connection>>> links_;
  std::deque<Connection*> owed_;              // the link of each reply owed, in the order of the commands
  Connection* home_ = nullptr;                // where commands without keys go: the link used last
  int route_slot_ = -1;                       // the slot of ConnectionConfig::route_key, -1 without one
  Connection* route_link_ = nullptr;          // the link connect() set up last for route_slot_
  bool multi_waiting_ = false;                // MULTI appended but not sent: it goes with the next command
  Connection* in_multi_ = nullptr;            // the link of the open MULTI, until its EXEC or DISCARD
  std::vector<Connection*> sent_since_wait_;  // links that carried a command since wait_where_sent()
  std::vector<Connection*> written_;          // links that carried a command since the last drop()
};

}  // namespace streamq::detail
