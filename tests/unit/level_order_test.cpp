// SPDX-License-Identifier: MIT
// The order of priority levels on its own: what each read asks, given what earlier reads
// brought.
#include <gtest/gtest.h>

#include <array>

#include "consumer/level_order.hpp"

namespace {

using namespace streamq::detail;
using Levels = std::vector<std::uint16_t>;
constexpr std::uint16_t H = 0, N = 1, L = 2;

/// Simulates `reads` reads of `room` against backlogs per level; returns entries served per level.
std::array<long, kLevels> serve(LevelOrder& order, std::array<long, kLevels>& backlog, int reads,
                                std::size_t room) {
  std::array<long, kLevels> served{};
  for (int i = 0; i < reads; ++i) {
    const ReadPlan p = order.plan(room);
    auto take = [&](const Levels& levels, std::size_t count) {
      for (std::uint16_t l : levels) {
        const long got = std::min<long>(backlog[l], static_cast<long>(count));
        backlog[l] -= got;
        served[l] += got;
        order.observe(l, static_cast<std::size_t>(got), count);
      }
    };
    take(p.probe, 1);
    take(p.main, p.count);
  }
  return served;
}

TEST(LevelOrder, StrictStartsAtHighAndDescendsOneLevelPerDrainedRead) {
  LevelOrder o({});
  ReadPlan p = o.plan(32);
  EXPECT_EQ(p.main, Levels{H});
  EXPECT_TRUE(p.probe.empty());
  EXPECT_EQ(p.count, 32u);
  EXPECT_FALSE(p.block);
  o.observe(H, 0, 32);
  p = o.plan(32);
  EXPECT_EQ(p.main, Levels{N});
  EXPECT_EQ(p.probe, Levels{H});  // high is asked in every read while normal is served
  EXPECT_EQ(p.count, 31u);
  EXPECT_EQ(p.most(), 32u);
  o.observe(H, 0, 1);
  o.observe(N, 31, 31);  // full: normal may have more, low is not asked
  p = o.plan(32);
  EXPECT_EQ(p.main, Levels{N});
  EXPECT_EQ(p.probe, Levels{H});
  o.observe(H, 1, 1);  // a high task arrived
  o.observe(N, 31, 31);
  p = o.plan(32);
  EXPECT_EQ(p.main, Levels{H});
  EXPECT_TRUE(p.probe.empty());
}

TEST(LevelOrder, StrictWaitsOnEveryLevelOnceAllAreDrained) {
  LevelOrder o({});
  o.observe(H, 0, 32);
  o.observe(N, 3, 32);
  o.observe(L, 0, 32);
  const ReadPlan p = o.plan(30);
  EXPECT_EQ(p.main, (Levels{H, N, L}));
  EXPECT_TRUE(p.block);
  EXPECT_EQ(p.count, 10u);  // a share each: the read never brings more than the room
  EXPECT_EQ(p.most(), 30u);
}

TEST(LevelOrder, StrictNeverAsksALowerLevelWhileAHigherOneHasEntries) {
  LevelOrder o({});
  std::array<long, kLevels> backlog{100, 100, 100};
  for (int i = 0; i < 40; ++i) {
    const ReadPlan p = o.plan(32);
    for (std::uint16_t l : p.main) {
      for (std::uint16_t h = 0; h < l; ++h) EXPECT_EQ(backlog[h], 0) << "read " << i;
    }
    for (const Levels* ls : {&p.probe, &p.main}) {
      const std::size_t count = ls == &p.probe ? 1 : p.count;
      for (std::uint16_t l : *ls) {
        const long got = std::min<long>(backlog[l], static_cast<long>(count));
        backlog[l] -= got;
        o.observe(l, static_cast<std::size_t>(got), count);
      }
    }
  }
  EXPECT_EQ(backlog, (std::array<long, kLevels>{0, 0, 0}));
}

TEST(LevelOrder, TightRoomAsksOneEntryOfEachLevelItMust) {
  LevelOrder o({});
  o.observe(H, 0, 1);
  o.observe(N, 0, 1);
  const ReadPlan p = o.plan(1);
  EXPECT_EQ(p.main, (Levels{H, N, L}));
  EXPECT_TRUE(p.probe.empty());
  EXPECT_EQ(p.count, 1u);
  EXPECT_FALSE(p.block);
}

TEST(LevelOrder, WeightedServesInProportionWhileEveryLevelHasEntries) {
  LevelOrder o({6, 3, 1});
  std::array<long, kLevels> backlog{100000, 100000, 100000};
  const auto served = serve(o, backlog, 1000, 32);
  const double total = static_cast<double>(served[H] + served[N] + served[L]);
  EXPECT_NEAR(served[H] / total, 0.6, 0.01);
  EXPECT_NEAR(served[N] / total, 0.3, 0.01);
  EXPECT_NEAR(served[L] / total, 0.1, 0.01);
}

TEST(LevelOrder, WeightedGivesAnEmptyLevelsShareToTheOthers) {
  LevelOrder o({6, 3, 1});
  std::array<long, kLevels> backlog{0, 100000, 100000};
  const auto served = serve(o, backlog, 400, 32);
  EXPECT_NEAR(static_cast<double>(served[N]) / static_cast<double>(served[N] + served[L]), 0.75, 0.02);
}

TEST(LevelOrder, WeightedRefilledLevelDoesNotPayBackItsIdleTime) {
  LevelOrder o({1, 1, 1});
  std::array<long, kLevels> backlog{0, 100000, 0};
  serve(o, backlog, 300, 32);  // normal alone for a long while
  backlog[L] = 100000;
  const auto served = serve(o, backlog, 100, 32);
  // Equal weights: an even split from here on, not low alone until it caught up.
  EXPECT_NEAR(static_cast<double>(served[L]) / static_cast<double>(served[N] + served[L]), 0.5, 0.05);
  EXPECT_GT(served[N], 0);
}

}  // namespace
