// SPDX-License-Identifier: MIT
#include "level_order.hpp"

#include <algorithm>
#include <limits>

namespace streamq::detail {

const char* level_name(std::uint16_t level) noexcept {
  switch (level) {
    case level_index(Priority::high): return "high";
    case level_index(Priority::low): return "low";
    default: return "normal";
  }
}

LevelOrder::LevelOrder(std::vector<int> weights) : weights_(std::move(weights)) {}

void LevelOrder::reset() noexcept { may_have_.fill(true); }

std::uint16_t LevelOrder::weighted_target() const {
  std::uint16_t best = kLevels;
  for (std::uint16_t l = 0; l < kLevels; ++l) {
    if (may_have_[l] && (best == kLevels || served_[l] < served_[best])) best = l;
  }
  return best;
}

ReadPlan LevelOrder::plan(std::size_t room) {
  room = std::max<std::size_t>(room, 1);
  ReadPlan p;
  std::uint16_t target = kLevels;
  if (strict()) {
    for (std::uint16_t l = 0; l < kLevels && target == kLevels; ++l) {
      if (may_have_[l]) target = l;
    }
  } else {
    target = weighted_target();
  }
  if (target == kLevels) {
    // Everything was found drained: wait on every level at once, a share of the room each.
    for (std::uint16_t l = 0; l < kLevels; ++l) p.main.push_back(l);
    p.count = std::max<std::size_t>(1, room / kLevels);
    p.block = true;
    return p;
  }
  for (std::uint16_t l = 0; l < kLevels; ++l) {
    if (!may_have_[l] && (!strict() || l < target)) p.probe.push_back(l);
  }
  if (room > p.probe.size()) {
    p.main = {target};
    p.count = room - p.probe.size();
  } else {
    // Too little room to ask the target for more than the probes: one entry of each.
    p.main = std::move(p.probe);
    p.probe.clear();
    p.main.insert(std::upper_bound(p.main.begin(), p.main.end(), target), target);
    p.count = 1;
  }
  return p;
}

void LevelOrder::observe(std::uint16_t level, std::size_t got, std::size_t asked) {
  const bool refilled = !may_have_[level] && got > 0;
  may_have_[level] = got >= asked && got > 0;
  if (strict()) return;
  if (refilled) {
    // Joins at the others' share: an old deficit earned while it was empty is not paid back.
    double floor = std::numeric_limits<double>::max();
    for (std::uint16_t l = 0; l < kLevels; ++l) {
      if (l != level && may_have_[l]) floor = std::min(floor, served_[l]);
    }
    if (floor != std::numeric_limits<double>::max()) served_[level] = std::max(served_[level], floor);
  }
  served_[level] += static_cast<double>(got) / weights_[level];
}

}  // namespace streamq::detail
