// SPDX-License-Identifier: MIT
#pragma once

#include <string>
#include <string_view>

namespace streamq::detail {

/// A parsed connection URL.
struct Endpoint {
  std::string host;  // empty for unix sockets
  int port = 6379;
  std::string unix_path;  // set for unix:// URLs
  std::string user;       // empty = no ACL user (AUTH <password> only)
  std::string password;   // empty = no AUTH
  int db = 0;

  bool is_unix() const noexcept { return !unix_path.empty(); }
  /// host:port or the socket path, without credentials (for messages).
  std::string describe() const;
};

/// Parses `redis://[user[:password]@]host[:port][/db]` and `unix:///path[?db=N&user=U&password=P]`.
/// Throws ConfigError naming what is wrong.
Endpoint parse_url(std::string_view url);

}  // namespace streamq::detail
