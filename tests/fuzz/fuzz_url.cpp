// SPDX-License-Identifier: MIT
// Fuzz target: the connection URL parser. Any input either parses into an endpoint that holds
// together, or is refused with ConfigError; nothing else may escape, crash or leak.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "redis/url.hpp"
#include "streamq/errors.hpp"

namespace {

void require(bool ok) {
  if (!ok) std::abort();  // a parsed endpoint that breaks its own rules: a finding
}

bool valid_port(int port) { return port >= 1 && port <= 65535; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view url(reinterpret_cast<const char*>(data), size);
  try {
    const streamq::detail::Endpoint e = streamq::detail::parse_url(url);
    require(e.db >= 0);
    if (e.is_sentinel()) {
      require(!e.master_name.empty());
      for (const auto& s : e.sentinels) require(!s.host.empty() && valid_port(s.port));
    } else if (e.is_cluster()) {
      require(e.db == 0);
      for (const auto& n : e.cluster_nodes) require(!n.host.empty() && valid_port(n.port));
    } else if (!e.is_unix()) {
      require(!e.host.empty() && valid_port(e.port));
    }
    // TLS settings come only with rediss://, which names one server.
    const streamq::TlsOptions& t = e.tls_options;
    if (!e.tls) {
      require(t.ca_file.empty() && t.ca_dir.empty() && t.cert_file.empty() && t.key_file.empty() &&
              t.server_name.empty() && t.verify);
    } else {
      require(!e.is_unix() && !e.is_sentinel() && !e.is_cluster());
    }
    require(!e.describe().empty());
  } catch (const streamq::ConfigError&) {
    // refused, with a message: what bad input must get
  }
  return 0;
}
