// SPDX-License-Identifier: MIT
#include "url.hpp"

#include <charconv>

#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

/// The URL without its secrets, for messages that end up in logs: the password of the user
/// info, and every query item but db's (a misspelt key may hold a password too). When an '@'
/// comes after a '?', it is not known whether the '?' is in the password or the '@' in a
/// query value: everything after the scheme is hidden (and parse_url refuses the URL).
std::string redacted(std::string_view url) {
  const auto scheme = url.find("://");
  const std::size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const auto query = url.find('?', start);
  const auto at_head = url.substr(0, query).rfind('@');
  const auto at_any = url.rfind('@');
  if (query != std::string_view::npos && at_any != std::string_view::npos && at_any > query) {
    return std::string(url.substr(0, start)) + "***";  // the '?' in a password, or the '@' in a value
  }
  std::string out;
  std::size_t rest = start;  // where the part after the user info begins
  if (at_head != std::string_view::npos && at_head >= start) {
    const auto colon = url.find(':', start);
    const std::size_t from = colon != std::string_view::npos && colon < at_head ? colon + 1 : start;
    out = std::string(url.substr(0, from)) + "***";
    rest = at_head;
  } else {
    out = std::string(url.substr(0, start));
  }
  std::string tail(url.substr(rest));
  const auto q = tail.find('?');
  if (q == std::string::npos) return out + tail;
  std::string hidden = tail.substr(0, q + 1);
  std::string_view items = std::string_view(tail).substr(q + 1);
  for (bool first = true; !items.empty() || first; first = false) {
    const auto amp = items.find('&');
    const std::string_view item = items.substr(0, amp);
    const auto eq = item.find('=');
    if (!first) hidden += '&';
    if (eq == std::string_view::npos) {
      hidden += item.empty() ? "" : "***";
    } else if (item.substr(0, eq) == "db") {
      hidden += item;
    } else {
      hidden += std::string(item.substr(0, eq + 1)) + "***";
    }
    if (amp == std::string_view::npos) break;
    items = items.substr(amp + 1);
    if (items.empty()) hidden += '&';
  }
  return out + hidden;
}

[[noreturn]] void bad(std::string_view url, const std::string& why) {
  throw ConfigError("connection.url \"" + redacted(url) + "\": " + why);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view url, std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) bad(url, "truncated percent escape");
    const int hi = hex_digit(in[i + 1]);
    const int lo = hex_digit(in[i + 2]);
    if (hi < 0 || lo < 0) bad(url, "invalid percent escape");
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

int parse_int(std::string_view url, std::string_view text, const char* what, int lo, int hi) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < lo || value > hi) {
    bad(url, std::string("invalid ") + what + " \"" + std::string(text) + "\"");
  }
  return value;
}

void parse_query(std::string_view url, std::string_view query, Endpoint& ep, bool sentinel) {
  auto tls_text = [&](std::string_view key, std::string_view value, std::string& field) {
    if (!ep.tls) bad(url, "\"" + std::string(key) + "\" is a TLS setting: the URL must be rediss://");
    field = percent_decode(url, value);
    if (field.empty()) bad(url, "empty \"" + std::string(key) + "\"");
  };
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) bad(url, "query parameter without '='");
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (key == "db") {
      ep.db = parse_int(url, value, "db", 0, 1 << 20);
    } else if (key == "user") {
      ep.user = percent_decode(url, value);
    } else if (key == "password") {
      ep.password = percent_decode(url, value);
    } else if (key == "tls_ca_file") {
      tls_text(key, value, ep.tls_options.ca_file);
    } else if (key == "tls_ca_dir") {
      tls_text(key, value, ep.tls_options.ca_dir);
    } else if (key == "tls_cert_file") {
      tls_text(key, value, ep.tls_options.cert_file);
    } else if (key == "tls_key_file") {
      tls_text(key, value, ep.tls_options.key_file);
    } else if (key == "tls_server_name") {
      tls_text(key, value, ep.tls_options.server_name);
    } else if (key == "tls_verify") {
      std::string flag;
      tls_text(key, value, flag);
      if (flag != "yes" && flag != "no") bad(url, "tls_verify must be yes or no");
      ep.tls_options.verify = flag == "yes";
    } else if (sentinel && key == "sentinel_user") {
      ep.sentinel_user = percent_decode(url, value);
    } else if (sentinel && key == "sentinel_password") {
      ep.sentinel_password = percent_decode(url, value);
    } else {
      bad(url, "unknown query parameter \"" + std::string(key) + "\"");
    }
  }
}

/// `host`, `host:port`, `[ipv6]` or `[ipv6]:port`.
HostPort parse_hostport(std::string_view url, std::string_view text, int default_port) {
  HostPort hp;
  hp.port = default_port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) bad(url, "unterminated IPv6 address");
    hp.host = std::string(text.substr(1, close - 1));
    text = text.substr(close + 1);
    if (!text.empty()) {
      if (text.front() != ':') bad(url, "garbage after IPv6 address");
      hp.port = parse_int(url, text.substr(1), "port", 1, 65535);
    }
  } else {
    const auto colon = text.rfind(':');
    hp.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) hp.port = parse_int(url, text.substr(colon + 1), "port", 1, 65535);
  }
  if (hp.host.empty()) bad(url, "missing host");
  return hp;
}

/// Splits off the query (parsed into `ep`) and the credentials before the last '@' (an
/// unencoded '@' may appear in a password); returns what is left between them.
std::string_view take_query_and_credentials(std::string_view url, std::string_view rest, Endpoint& ep,
                                            bool sentinel) {
  const auto q = rest.find('?');
  if (q != std::string_view::npos) {
    parse_query(url, rest.substr(q + 1), ep, sentinel);
    rest = rest.substr(0, q);
  }
  const auto at = rest.rfind('@');
  if (at == std::string_view::npos) return rest;
  const std::string_view cred = rest.substr(0, at);
  const auto colon = cred.find(':');
  if (colon == std::string_view::npos) {
    // redis://secret@host is how redis-py and redis-cli spell "password only".
    ep.password = percent_decode(url, cred);
  } else {
    ep.user = percent_decode(url, cred.substr(0, colon));
    ep.password = percent_decode(url, cred.substr(colon + 1));
  }
  return rest.substr(at + 1);
}

/// `host[:port][,host[:port]...]`, each with `default_port` when it names none.
std::vector<HostPort> parse_host_list(std::string_view url, std::string_view hosts, int default_port) {
  std::vector<HostPort> out;
  while (true) {
    const auto comma = hosts.find(',');
    out.push_back(parse_hostport(url, hosts.substr(0, comma), default_port));
    if (comma == std::string_view::npos) return out;
    hosts = hosts.substr(comma + 1);
  }
}

/// The part after `redis+sentinel://`: sentinel list, master name, optional db.
void parse_sentinel(std::string_view url, std::string_view rest, Endpoint& ep) {
  rest = take_query_and_credentials(url, rest, ep, true);
  const auto slash = rest.find('/');
  ep.sentinels = parse_host_list(url, rest.substr(0, slash), 26379);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  const auto next = path.find('/');
  ep.master_name = percent_decode(url, path.substr(0, next));
  if (ep.master_name.empty()) bad(url, "missing master name (redis+sentinel://host:port/<master-name>)");
  // What Sentinel itself accepts in `sentinel monitor <name>`.
  for (const char c : ep.master_name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_';
    if (!ok) bad(url, "a master name has only letters, digits, '.', '-' and '_'");
  }
  if (next != std::string_view::npos) {
    const std::string_view db = path.substr(next + 1);
    if (!db.empty()) ep.db = parse_int(url, db, "db", 0, 1 << 20);
  }
}

/// The part after `redis+cluster://`: the seed nodes; no db (a cluster has only db 0).
void parse_cluster(std::string_view url, std::string_view rest, Endpoint& ep) {
  rest = take_query_and_credentials(url, rest, ep, false);
  if (ep.db != 0) bad(url, "Redis Cluster has only db 0");
  const auto slash = rest.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && parse_int(url, db, "db", 0, 1 << 20) != 0) bad(url, "Redis Cluster has only db 0");
  }
  ep.cluster_nodes = parse_host_list(url, rest.substr(0, slash), 6379);
}

}  // namespace

std::string HostPort::describe() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Endpoint::describe() const {
  if (is_unix()) return unix_path;
  if (is_sentinel()) {
    std::string out = "master " + master_name + " of sentinels ";
    for (std::size_t i = 0; i < sentinels.size(); ++i) {
      if (i > 0) out += ',';
      out += sentinels[i].describe();
    }
    return out;
  }
  if (is_cluster()) {
    std::string out = "cluster ";
    for (std::size_t i = 0; i < cluster_nodes.size(); ++i) {
      if (i > 0) out += ',';
      out += cluster_nodes[i].describe();
    }
    return out;
  }
  return HostPort{host, port}.describe();
}

Endpoint parse_url(std::string_view url) {
  Endpoint ep;
  // Ambiguous, and what the parser would make of it could echo part of a password.
  if (const auto q = url.find('?');
      q != std::string_view::npos && url.find('@', q) != std::string_view::npos) {
    bad(url,
        "an '@' after a '?': percent-encode a '?' in a password as %3F and an '@' in a query value as %40");
  }
  constexpr std::string_view tcp = "redis://";
  constexpr std::string_view unix_scheme = "unix://";
  constexpr std::string_view sentinel = "redis+sentinel://";
  constexpr std::string_view cluster = "redis+cluster://";
  if (url.starts_with(unix_scheme)) {
    std::string_view rest = url.substr(unix_scheme.size());
    const auto q = rest.find('?');
    if (q != std::string_view::npos) {
      parse_query(url, rest.substr(q + 1), ep, false);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest.front() != '/') bad(url, "unix socket path must be absolute");
    ep.unix_path = percent_decode(url, rest);
    return ep;
  }
  if (url.starts_with(sentinel)) {
    parse_sentinel(url, url.substr(sentinel.size()), ep);
    return ep;
  }
  if (url.starts_with(cluster)) {
    parse_cluster(url, url.substr(cluster.size()), ep);
    return ep;
  }
  constexpr std::string_view tls = "rediss://";
  if (url.starts_with("rediss+")) {
    bad(url, "TLS is supported with one server (rediss://), not with Redis Cluster or Sentinel");
  }
  ep.tls = url.starts_with(tls);
  if (!ep.tls && !url.starts_with(tcp))
    bad(url, "scheme must be redis://, rediss://, redis+sentinel://, redis+cluster:// or unix://");

  std::string_view rest =
      take_query_and_credentials(url, url.substr(ep.tls ? tls.size() : tcp.size()), ep, false);
  const auto slash = rest.find('/');
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) ep.db = parse_int(url, db, "db", 0, 1 << 20);
  }
  HostPort hp = parse_hostport(url, rest.substr(0, slash), 6379);
  ep.host = std::move(hp.host);
  ep.port = hp.port;
  return ep;
}

}  // namespace streamq::detail
