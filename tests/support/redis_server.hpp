// SPDX-License-Identifier: MIT
// Test support: a private redis-server per test, and a raw client to inspect it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "redis/connection.hpp"
#include "redis/reply.hpp"

namespace streamq::test {

struct RedisServerOptions {
  bool appendonly = false;           // AOF with appendfsync always when true
  std::vector<std::string> extra{};  // more redis-server arguments
  /// Non-empty: run as a sentinel (`redis-server <dir>/sentinel.conf --sentinel`), the file
  /// holding this text at the first start (the sentinel rewrites it; a restart keeps that).
  std::string sentinel_config{};
  /// A cluster node: its port is one whose cluster bus port (port + 10000) is free too.
  bool cluster_node = false;
  /// Non-empty: a TLS port too (`tls_port()`), with `ca.crt`, `server.crt` and `server.key`
  /// of this directory; the plain port stays for the tests' own client.
  std::string tls_dir{};
  /// With tls_dir: whether TLS clients must show a certificate signed by `ca.crt`.
  bool tls_auth_clients = false;
};

/// A free TCP port on 127.0.0.1 (free when asked: another process may take it first).
int free_port();

/// Starts `redis-server` (or $STREAMQ_REDIS_SERVER) on a free 127.0.0.1 port with a temp dir,
/// waits for PING, and stops only that process (by pid) when destroyed. Throws
/// std::runtime_error when redis-server cannot be started.
class RedisServer {
 public:
  explicit RedisServer(RedisServerOptions options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const noexcept { return port_; }
  pid_t pid() const noexcept { return pid_; }
  const std::string& dir() const noexcept { return dir_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  /// With RedisServerOptions::tls_dir: the TLS port, and `rediss://127.0.0.1:<it>`.
  int tls_port() const noexcept { return tls_port_; }
  std::string tls_url() const { return "rediss://127.0.0.1:" + std::to_string(tls_port_); }

  /// SIGKILL the server and reap it.
  void kill9();
  /// Start again on the same port and directory (AOF is replayed when enabled).
  void restart();
  /// As restart(), with `extra` for RedisServerOptions::extra from now on.
  void restart(std::vector<std::string> extra);
  void pause();   // SIGSTOP
  void resume();  // SIGCONT

 private:
  void spawn();
  void wait_ready();

  RedisServerOptions options_;
  std::string dir_;
  int port_ = 0;
  int tls_port_ = 0;
  pid_t pid_ = -1;
};

/// A master with one replica and three sentinels watching it as `name` (quorum 2), all on
/// private loopback ports, each process stopped by pid. Failover settings are short: down
/// after 500 ms, failover timeout 3 s.
class SentinelTopology {
 public:
  explicit SentinelTopology(std::string name = "streamq");
  /// Waits (up to 20 s) until every sentinel knows the replica and the other two sentinels,
  /// so that a failover can start at once; false when they did not.
  bool wait_until_watched();
  /// `redis+sentinel://` URL over the three sentinels (`query` appended after '?' if given).
  std::string url(const std::string& query = "") const;
  /// The port the first answering sentinel names for the master, or 0.
  int master_port_by_sentinels();
  /// The sentinels' logs, for a failure message.
  std::string sentinel_logs() const;
  /// True when every sentinel names 127.0.0.1:`port` as the master.
  bool all_sentinels_name(int port);
  /// Server `i` (0: the first master, 1: its replica): whichever role it has now.
  RedisServer& server(int i) { return i == 0 ? first_ : second_; }
  RedisServer& sentinel(int i) { return *sentinels_[static_cast<std::size_t>(i)]; }
  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
  RedisServer first_;
  RedisServer second_;
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
};

/// A Redis Cluster on private loopback ports: `masters` masters with `replicas_each` replicas
/// each, the 16384 slots split evenly in master order, made with CLUSTER ADDSLOTS, MEET and
/// REPLICATE (cluster-node-timeout 1000 ms, so a failover takes a few seconds). Each process is
/// stopped by pid.
class ClusterTopology {
 public:
  explicit ClusterTopology(int masters = 3, int replicas_each = 0);
  /// `redis+cluster://` URL naming the nodes `nodes` (indices; all masters when empty).
  std::string url(const std::vector<int>& nodes = {}) const;
  int size() const noexcept { return static_cast<int>(nodes_.size()); }
  /// Node `i`: masters first (0 .. masters-1), then the replicas of master 0, 1, ...
  RedisServer& node(int i) { return *nodes_[static_cast<std::size_t>(i)]; }
  /// The node that serves `slot` now, as the first live node sees it; -1 if none.
  int owner_of(int slot);
  /// Node IDs (CLUSTER MYID).
  std::string id(int i);
  /// Moves `slot` with every key in it from its owner to node `to`, as redis-cli --cluster
  /// reshard does: IMPORTING/MIGRATING, MIGRATE of the keys in batches of `batch`, with
  /// `between()` called after each batch, then SETSLOT NODE on every master.
  void migrate_slot(int slot, int to, int batch = 10, const std::function<void()>& between = {});
  /// True once every live node says cluster_state:ok and agrees on `slot`'s owner (or on every
  /// slot's when `slot` is -1).
  bool wait_until_ok(int slot = -1, std::chrono::milliseconds timeout = std::chrono::seconds(20));

 private:
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  int masters_;
};

/// A raw client for assertions (argv commands, replies as detail::Reply).
class Client {
 public:
  explicit Client(const std::string& url);
  detail::Reply cmd(std::initializer_list<std::string_view> args);
  detail::Reply cmd(const std::vector<std::string>& args);
  std::int64_t integer(std::initializer_list<std::string_view> args);
  /// Entries of XRANGE key - + as (id, fields).
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> xrange(
      const std::string& key);
  /// INFO server's redis_version ("6.2.16"; Valkey 8 reports the Redis version it matches, 7.2.4).
  std::string redis_version();
  /// True when redis_version() is at least major.minor.
  bool redis_at_least(int major, int minor);
  /// Field value of an entry, or empty.
  static std::string get(const std::vector<std::pair<std::string, std::string>>& fields,
                         std::string_view name);

 private:
  detail::Connection conn_;
};

/// fork + exec of `binary` with `argv` (null-terminated), its stderr appended to
/// `stderr_path` when given; the child is killed when the test process dies. Returns the pid,
/// or -1. An exec failure shows as the child exiting with 127.
pid_t spawn_child(const std::string& binary, std::vector<char*>& argv, const std::string& stderr_path = "");

/// Polls `predicate` until it holds or `timeout` passes; returns its last value.
bool wait_until(const std::function<bool()>& predicate,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// Calls `call` until it returns without a ConnectionError (a client reconnecting after its
/// server restarted or killed its connection: the first call may find the old socket dead),
/// or `timeout` passes; true when a call succeeded.
bool succeeds_eventually(const std::function<void()>& call,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// A key name unique to the running test ("<Suite>.<Test>:<suffix>").
std::string unique_key(std::string_view suffix = "q");

}  // namespace streamq::test
