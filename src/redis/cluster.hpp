// SPDX-License-Identifier: MIT
// Redis Cluster: key slots (CRC16 and hash tags), the slot a command addresses, the slot map
// read from CLUSTER SHARDS or CLUSTER SLOTS, and the MOVED/ASK redirections.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reply.hpp"
#include "url.hpp"

namespace streamq::detail {

class Argv;

inline constexpr int kClusterSlots = 16384;

/// CRC16-XMODEM (the checksum Redis Cluster hashes keys with).
std::uint16_t crc16(std::string_view data) noexcept;

/// The cluster slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag (the text
/// between the first '{' and the first '}' after it, when that text is not empty), mod 16384.
int key_slot(std::string_view key) noexcept;
/// Whether `key` has a hash tag, so that every key made by appending to it is in its slot.
bool has_hash_tag(std::string_view key) noexcept;

/// The slot the command's keys are in, -1 for a command without keys (TIME, CLIENT ..., WAIT,
/// SCRIPT ..., MULTI, a script called with no keys). Knows the commands streamq sends; the
/// first key decides (Redis refuses a command whose keys are in several slots: CROSSSLOT).
int command_slot(const Argv& argv) noexcept;

/// Which master serves each slot.
struct SlotMap {
  std::vector<HostPort> masters;
  std::vector<std::int16_t> owner = std::vector<std::int16_t>(kClusterSlots, -1);  // index into masters

  bool empty() const noexcept { return masters.empty(); }
  /// The master of `slot`, nullptr when no master serves it.
  const HostPort* master_of(int slot) const noexcept;
  /// Records that `master` serves `slot` now (after a MOVED).
  void assign(int slot, const HostPort& master);
};

/// Parses a CLUSTER SHARDS reply (Redis >= 7.0). `asked` is the node that answered: a node
/// whose endpoint is unknown ("?" or empty) is taken to be at its address. Throws
/// streamq::Error on a reply of an unexpected shape.
SlotMap parse_cluster_shards(ReplyView reply, const HostPort& asked);
/// Parses a CLUSTER SLOTS reply (Redis < 7.0).
SlotMap parse_cluster_slots(ReplyView reply, const HostPort& asked);

/// A MOVED or ASK error reply: `MOVED <slot> <host>:<port>`.
struct Redirect {
  bool ask = false;  // ASK: the slot is being migrated; only this command goes there, after ASKING
  int slot = -1;
  HostPort to;
};
/// The redirection an error reply asks for; nullopt for any other error.
std::optional<Redirect> parse_redirect(std::string_view error);

}  // namespace streamq::detail
