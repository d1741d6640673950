// SPDX-License-Identifier: MIT
// The validated settings of a connection, made from the public ConnectionOptions.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "backoff.hpp"
#include "streamq/common.hpp"
#include "url.hpp"

namespace streamq::detail {

class TlsContext;

/// Validated connection settings.
struct ConnectionConfig {
  Endpoint endpoint;
  Millis connect_timeout{2000};
  Millis socket_timeout{5000};
  std::string client_name;
  Millis backoff_base{50};
  Millis backoff_max{2000};
  /// With a redis+cluster:// URL: a key of the queue this connection serves (its stream). The
  /// master of its slot is the one connect() connects to, and where commands without keys go
  /// until a command with keys went elsewhere. Empty: the first master of the slot map.
  std::string route_key;
  /// Set for rediss:// URLs: every connect runs a TLS handshake with it.
  std::shared_ptr<const TlsContext> tls;
};

/// Validates ConnectionOptions; `role` ("producer", "consumer", "stats", ...) names the default
/// client name ("streamq-<role>") and picks the default backoff cap; `stream` is the queue the
/// connection serves (the route_key), "" for one that serves many. Throws ConfigError naming
/// the field, also when a redis+cluster:// URL is given with a stream whose keys would not
/// share its slot (no hash tag).
ConnectionConfig make_connection_config(const ConnectionOptions& options, std::string_view role,
                                        std::string_view stream = {});

/// ConfigError unless every key derived from `stream` (`<stream>:dlq`, `<stream>:delayed`, ...)
/// is in the stream's slot: on Redis Cluster a script may only touch keys of one slot. `field`
/// names the option in the message.
void check_cluster_stream(std::string_view stream, std::string_view field);

}  // namespace streamq::detail
