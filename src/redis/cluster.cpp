// SPDX-License-Identifier: MIT
#include "cluster.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include "connection.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    t[static_cast<std::size_t>(i)] = crc;
  }
  return t;
}
constexpr std::array<std::uint16_t, 256> kCrc16 = make_crc16_table();

}  // namespace

std::uint16_t crc16(std::string_view s) noexcept {
  std::uint16_t crc = 0;
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    crc = static_cast<std::uint16_t>((crc << 8) ^ kCrc16[((crc >> 8) ^ byte) & 0xff]);
  }
  return crc;
}

namespace {

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           const auto up = [](char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; };
           return up(x) == up(y);
         });
}

bool any_of(std::string_view cmd, std::initializer_list<std::string_view> names) noexcept {
  return std::any_of(names.begin(), names.end(), [&](std::string_view n) { return iequals(cmd, n); });
}

[[noreturn]] void bad_map(const char* what) {
  throw Error(std::string("protocol: unexpected cluster slot map from Redis (") + what + ")");
}

int parse_port(std::string_view text) {
  int port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port <= 0 || port > 65535) return -1;
  return port;
}

/// Adds `[first, last]` served by `master` to the map.
void add_range(SlotMap& map, std::int64_t first, std::int64_t last, const HostPort& master) {
  if (first < 0 || last >= kClusterSlots || first > last) bad_map("slot range out of bounds");
  for (auto s = first; s <= last; ++s) map.assign(static_cast<int>(s), master);
}

/// A node's address as the cluster announces it; "?" or "" means "where you asked".
std::string announced_host(std::string_view host, const HostPort& asked) {
  return host.empty() || host == "?" ? asked.host : std::string(host);
}

}  // namespace

namespace {
/// The hash tag of `key` (empty when it has none).
std::string_view hash_tag(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return {};
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return {};
  return key.substr(open + 1, close - open - 1);
}
}  // namespace

int key_slot(std::string_view key) noexcept {
  const std::string_view tag = hash_tag(key);
  return crc16(tag.empty() ? key : tag) & (kClusterSlots - 1);
}

bool has_hash_tag(std::string_view key) noexcept { return !hash_tag(key).empty(); }

int command_slot(const Argv& argv) noexcept {
  if (argv.size() < 2) return -1;
  const std::string_view cmd = argv[0];
  std::size_t key = 1;
  if (any_of(cmd, {"EVALSHA", "EVAL", "EVALSHA_RO", "EVAL_RO", "FCALL", "FCALL_RO"})) {
    if (argv.size() < 4 || argv[2] == "0") return -1;
    key = 3;
  } else if (any_of(cmd, {"XREADGROUP", "XREAD"})) {
    key = 0;
    // XREADGROUP's options follow GROUP <group> <consumer> (a group named "streams" is no keyword).
    for (std::size_t i = iequals(cmd, "XREADGROUP") ? 4 : 1; i + 1 < argv.size(); ++i) {
      if (iequals(argv[i], "STREAMS")) {
        key = i + 1;
        break;
      }
    }
    if (key == 0) return -1;
  } else if (any_of(cmd, {"XINFO", "XGROUP", "OBJECT"}) ||
             (iequals(cmd, "MEMORY") && iequals(argv[1], "USAGE"))) {
    if (argv.size() < 3) return -1;
    key = 2;
  } else if (any_of(cmd,
                    {"PING",     "TIME",      "INFO",    "CONFIG",   "CLIENT",    "WAIT",         "SCRIPT",
                     "MULTI",    "EXEC",      "DISCARD", "ACL",      "AUTH",      "SELECT",       "HELLO",
                     "ROLE",     "CLUSTER",   "SCAN",    "DBSIZE",   "COMMAND",   "FUNCTION",     "MEMORY",
                     "LATENCY",  "SLOWLOG",   "ECHO",    "READONLY", "READWRITE", "ASKING",       "SENTINEL",
                     "FLUSHALL", "FLUSHDB",   "DEBUG",   "LASTSAVE", "BGSAVE",    "BGREWRITEAOF", "SAVE",
                     "SHUTDOWN", "RANDOMKEY", "PUBLISH", "SUBSCRIBE"})) {
    return -1;
  }
  return key < argv.size() ? key_slot(argv[key]) : -1;
}

const HostPort* SlotMap::master_of(int slot) const noexcept {
  if (slot < 0 || slot >= kClusterSlots) return nullptr;
  const int i = owner[static_cast<std::size_t>(slot)];
  return i < 0 ? nullptr : &masters[static_cast<std::size_t>(i)];
}

void SlotMap::assign(int slot, const HostPort& master) {
  auto it = std::find(masters.begin(), masters.end(), master);
  if (it == masters.end()) {
    masters.push_back(master);
    it = masters.end() - 1;
  }
  owner[static_cast<std::size_t>(slot)] = static_cast<std::int16_t>(it - masters.begin());
}

SlotMap parse_cluster_shards(ReplyView reply, const HostPort& asked) {
  SlotMap map;
  if (!reply.check().is_array()) bad_map("CLUSTER SHARDS is not an array");
  for (std::size_t s = 0; s < reply.size(); ++s) {
    const ReplyView shard = reply[s];
    const ReplyView slots = shard.field("slots");
    const ReplyView nodes = shard.field("nodes");
    if (!slots.is_array() || !nodes.is_array() || slots.size() % 2 != 0)
      bad_map("a shard without slots or nodes");
    if (slots.size() == 0) continue;  // a shard that serves nothing (a new empty master)
    std::optional<HostPort> master;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const ReplyView node = nodes[n];
      const ReplyView role = node.field("role");
      const ReplyView health = node.field("health");
      if (!role.is_string() || role.str() != "master") continue;
      if (health.is_string() && health.str() == "failed") continue;  // (online, failed, loading)
      const ReplyView endpoint = node.field("endpoint");
      const ReplyView ip = node.field("ip");
      const ReplyView port = node.field("port");
      if (!port.is_integer()) bad_map("a node without a port");
      std::string_view host = endpoint.is_string() ? endpoint.str() : std::string_view();
      if ((host.empty() || host == "?") && ip.is_string()) host = ip.str();
      master = HostPort{announced_host(host, asked), static_cast<int>(port.integer())};
      break;
    }
    if (!master) continue;  // its master failed and no replica was promoted yet: no owner
    for (std::size_t i = 0; i + 1 < slots.size(); i += 2) {
      add_range(map, slots[i].integer(), slots[i + 1].integer(), *master);
    }
  }
  return map;
}

SlotMap parse_cluster_slots(ReplyView reply, const HostPort& asked) {
  SlotMap map;
  if (!reply.check().is_array()) bad_map("CLUSTER SLOTS is not an array");
  for (std::size_t r = 0; r < reply.size(); ++r) {
    const ReplyView range = reply[r];
    if (range.size() < 3 || !range[2].is_array() || range[2].size() < 2)
      bad_map("a range without its master");
    const ReplyView node = range[2];
    const HostPort master{announced_host(node[0].str(), asked), static_cast<int>(node[1].integer())};
    add_range(map, range[0].integer(), range[1].integer(), master);
  }
  return map;
}

std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    error.remove_prefix(4);
    r.ask = true;
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view slot = error.substr(0, space);
  const std::string_view address = error.substr(space + 1);
  const auto [end, ec] = std::from_chars(slot.data(), slot.data() + slot.size(), r.slot);
  if (ec != std::errc() || end != slot.data() + slot.size() || r.slot < 0 || r.slot >= kClusterSlots) {
    return std::nullopt;
  }
  const auto colon = address.rfind(':');  // an empty host ("MOVED 1 :7001"): the node that answered
  if (colon == std::string_view::npos) return std::nullopt;
  r.to.port = parse_port(address.substr(colon + 1));
  if (r.to.port < 0) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  r.to.host = std::string(host);
  return r;
}

}  // namespace streamq::detail
