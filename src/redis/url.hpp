// SPDX-License-Identifier: MIT
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "streamq/common.hpp"

namespace streamq::detail {

/// A host and port (a sentinel's address, or the master one reported).
struct HostPort {
  std::string host;
  int port = 0;
  /// host:port, with brackets around an IPv6 address.
  std::string describe() const;
  bool operator==(const HostPort&) const = default;
};

/// A parsed connection URL.
struct Endpoint {
  std::string host;  // empty for unix sockets
  int port = 6379;
  std::string unix_path;  // set for unix:// URLs
  std::string user;       // empty = no ACL user (AUTH <password> only)
  std::string password;   // empty = no AUTH
  int db = 0;
  // Set for redis+sentinel:// URLs: the master is whatever these sentinels say `master_name`
  // is (host and port above are then unused); user and password above are the data nodes'.
  std::vector<HostPort> sentinels;
  std::string master_name;
  std::string sentinel_user;      // empty = no ACL user for the sentinels
  std::string sentinel_password;  // empty = the sentinels get no AUTH
  // Set for redis+cluster:// URLs: nodes to learn the slot map from (host and port above are
  // then unused; user and password are every node's).
  std::vector<HostPort> cluster_nodes;
  // rediss://: TLS, with the settings the URL's query gave (tls_ca_file=, ...).
  bool tls = false;
  TlsOptions tls_options;

  bool is_unix() const noexcept { return !unix_path.empty(); }
  bool is_sentinel() const noexcept { return !sentinels.empty(); }
  bool is_cluster() const noexcept { return !cluster_nodes.empty(); }
  /// host:port, the socket path, "master <name> of sentinels a:1,b:2" or "cluster a:1,b:2", without
  /// credentials (for messages).
  std::string describe() const;
};

/// Parses `redis://[user[:password]@]host[:port][/db]` (and the same with `rediss://`, whose
/// query may hold tls_ca_file=, tls_ca_dir=, tls_cert_file=, tls_key_file=, tls_server_name=,
/// tls_verify=yes|no), `unix:///path[?db=N&user=U&password=P]`
/// and `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/master-name[/db]`
/// (query `sentinel_user=U&sentinel_password=P`; sentinel port default 26379) and
/// `redis+cluster://[user[:password]@]host[:port][,host[:port]...][/]` (a cluster has db 0 only).
/// Throws ConfigError naming what is wrong.
Endpoint parse_url(std::string_view url);

}  // namespace streamq::detail
