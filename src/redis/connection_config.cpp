// SPDX-License-Identifier: MIT
#include "connection_config.hpp"

#include <algorithm>
#include <utility>

#include "cluster.hpp"
#include "streamq/errors.hpp"
#include "tls.hpp"
#include "util/durations.hpp"

namespace streamq::detail {

void check_cluster_stream(std::string_view stream, std::string_view field) {
  if (has_hash_tag(stream)) return;
  const std::string s(stream);
  throw ConfigError(std::string(field) + " \"" + s +
                    "\" cannot be used on Redis Cluster: the queue's keys (" + s + ":dlq, " + s +
                    ":delayed, ...) must share the stream's slot, so the name needs a hash tag, e.g. \"{" +
                    s + "}\" (a script may only touch keys of one slot)");
}

namespace {

/// The TLS context of a rediss:// URL, from the URL's tls_* settings and options.tls (the same
/// setting in both with different values is a ConfigError); null for any other URL, where a
/// TLS setting is a ConfigError.
std::shared_ptr<const TlsContext> tls_config(Endpoint& ep, const TlsOptions& options) {
  TlsOptions merged = ep.tls_options;
  const std::pair<std::string TlsOptions::*, const char*> texts[] = {
      {&TlsOptions::ca_file, "ca_file"},
      {&TlsOptions::ca_dir, "ca_dir"},
      {&TlsOptions::cert_file, "cert_file"},
      {&TlsOptions::key_file, "key_file"},
      {&TlsOptions::server_name, "server_name"}};
  bool any = !options.verify;
  for (const auto& [field, name] : texts) {
    const std::string& given = options.*field;
    if (given.empty()) continue;
    any = true;
    std::string& from_url = merged.*field;
    if (!from_url.empty() && from_url != given) {
      throw ConfigError(std::string("connection.tls.") + name + " and the URL's tls_" + name +
                        " differ: give it once");
    }
    from_url = given;
  }
  merged.verify = ep.tls_options.verify && options.verify;
  if (!ep.tls) {
    if (!any) return nullptr;
    if (ep.is_cluster() || ep.is_sentinel() || ep.is_unix()) {
      throw ConfigError("connection.tls is set, but TLS is supported with one server (rediss://) only");
    }
    throw ConfigError("connection.tls is set, but connection.url is not a rediss:// URL");
  }
  ep.tls_options = merged;
  return make_tls_context(merged);
}

}  // namespace

ConnectionConfig make_connection_config(const ConnectionOptions& options, std::string_view role,
                                        std::string_view stream) {
  ConnectionConfig c;
  c.endpoint = parse_url(options.url);
  c.tls = tls_config(c.endpoint, options.tls);
  if (c.endpoint.is_cluster() && !stream.empty()) check_cluster_stream(stream, "stream");
  c.route_key = std::string(stream);
  check_duration(options.connect_timeout, Millis(1), "connection.connect_timeout");
  check_duration(options.socket_timeout, Millis(1), "connection.socket_timeout");
  check_duration(options.backoff_base, Millis(1), "connection.backoff_base");
  check_duration(options.backoff_max, Millis(0), "connection.backoff_max");
  // 0 = the role's default: a Producer's or StatsReader's caller waits for the reconnect; a
  // Consumer has nobody waiting, and a wrong host should not be hammered.
  const Millis backoff_max =
      options.backoff_max.count() != 0
          ? options.backoff_max
          : std::max(options.backoff_base, role == "consumer" ? kConsumerBackoffMax : kCallerBackoffMax);
  if (backoff_max < options.backoff_base) {
    throw ConfigError("connection.backoff_max must be 0 (the default) or >= connection.backoff_base");
  }
  c.connect_timeout = options.connect_timeout;
  c.socket_timeout = options.socket_timeout;
  c.backoff_base = options.backoff_base;
  c.backoff_max = backoff_max;
  c.client_name = options.client_name.empty() ? "streamq-" + std::string(role) : options.client_name;
  if (std::any_of(c.client_name.begin(), c.client_name.end(),
                  [](unsigned char ch) { return ch <= ' ' || ch >= 127; })) {
    throw ConfigError("connection.client_name must be printable ASCII without spaces");
  }
  return c;
}

}  // namespace streamq::detail
