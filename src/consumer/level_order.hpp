// SPDX-License-Identifier: MIT
// The order in which a Consumer serves priority levels: which streams the fetcher's next read
// asks, and for how many entries each. Pure (no Redis, no lock): the fetcher owns one and
// tells it what every read brought.
//
// Each level is believed to have entries ("may have more") while its last read came back
// full, and drained once a read came back short. A read asks one target level for most of its
// room, and every believed-drained level that the order could prefer (strict: the more
// important ones; weighted: all of them) for one entry each, in the same request, so a level
// that refills is seen by the very next read. Strict order targets the most important level
// that may have entries, so a lower level is never read while a higher one was not found
// drained; weighted order targets the level furthest behind its share of the entries served
// (by weight), and a level that refills starts from the others' share, never from its own
// old deficit, so it can neither starve the others nor be starved. When every level is found
// drained, one blocking read waits on all of them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "streamq/common.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

constexpr std::uint16_t level_index(Priority p) noexcept { return static_cast<std::uint16_t>(p); }
inline constexpr std::uint16_t kNormalLevel = level_index(Priority::normal);
/// Level names as users see them (stats labels, logs).
const char* level_name(std::uint16_t level) noexcept;

/// One request's reads: a probe (COUNT 1 over `probe`, one command; none when empty), then the
/// main read (COUNT `count` over `main`, one command), blocking only when `block`.
struct ReadPlan {
  std::vector<std::uint16_t> probe;
  std::vector<std::uint16_t> main;
  std::size_t count = 0;
  bool block = false;
  /// Most entries the request can bring.
  std::size_t most() const noexcept { return probe.size() + main.size() * count; }
};

class LevelOrder {
 public:
  /// `weights` empty = strict order; otherwise one weight (>= 1) per level.
  explicit LevelOrder(std::vector<int> weights);

  /// The reads for a request that may bring `room` (>= 1) entries. Brings at most `room`,
  /// except when `room` is smaller than the levels it must ask (then one entry of each).
  ReadPlan plan(std::size_t room);
  /// A read asked `level` for `asked` entries and got `got`.
  void observe(std::uint16_t level, std::size_t got, std::size_t asked);
  /// Every level may have entries again (after a reconnect: nothing is known).
  void reset() noexcept;

  bool strict() const noexcept { return weights_.empty(); }
  bool may_have(std::uint16_t level) const noexcept { return may_have_[level]; }

 private:
  std::uint16_t weighted_target() const;

  std::vector<int> weights_;
  std::array<bool, kLevels> may_have_{true, true, true};
  std::array<double, kLevels> served_{};  // weighted: entries served / weight
};

}  // namespace streamq::detail
