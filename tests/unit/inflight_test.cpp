// SPDX-License-Identifier: MIT
// The in-flight set on its own (no server, one thread): who runs what, when, and what is
// left for whom.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "consumer/inflight.hpp"
#include "consumer/task_control.hpp"

namespace {

using namespace streamq::detail;
using namespace std::chrono_literals;

Work work(const std::string& id, Origin origin = Origin::fresh) {
  Work w;
  w.key = EntryKey{0, id};
  w.fields = std::make_shared<streamq::Fields>(streamq::Fields{{"task_id", "t-" + id}});
  w.origin = origin;
  return w;
}

std::vector<Work> works(std::initializer_list<Work> ws) { return std::vector<Work>(ws); }

struct InFlightTest : ::testing::Test {
  Metrics metrics;
  InFlight f{8, metrics};

  void deliver(std::initializer_list<Work> ws) {
    auto v = works(ws);
    f.deliver(v);
  }
  std::string take_id() {
    auto w = f.take();
    return w ? w->key.id : "<none>";
  }
};

TEST_F(InFlightTest, HandsOutInOrderAndNeverTwice) {
  auto batch = works({work("1-0"), work("2-0")});
  EXPECT_EQ(f.deliver(batch), 2u);
  EXPECT_TRUE(batch.empty());
  auto again = works({work("1-0"), work("3-0")});
  EXPECT_EQ(f.deliver(again), 1u);  // 1-0 is held already
  EXPECT_EQ(take_id(), "1-0");
  EXPECT_EQ(take_id(), "2-0");
  EXPECT_EQ(take_id(), "3-0");
  EXPECT_EQ(f.held_count(), 3u);
  f.stop();
  EXPECT_EQ(take_id(), "<none>");
}

// A batch delivered while every handler waits: each idle handler gets an entry while the others
// run long tasks (none waits behind a long task for a handler that stays asleep).
TEST_F(InFlightTest, EveryIdleHandlerTakesAnEntryWhileTheOthersRunLongTasks) {
  constexpr int kHandlers = 4;
  std::promise<void> release;
  const std::shared_future<void> released = release.get_future().share();
  std::vector<std::future<std::string>> taken;
  for (int i = 0; i < kHandlers; ++i) {
    taken.push_back(std::async(std::launch::async, [&] {
      std::string id = take_id();
      released.wait();  // a long task: its handler does not come back for more
      return id;
    }));
  }
  // Every handler waits in take() before the batch comes, so each is woken for it.
  for (int i = 0; i < 200 && f.idle_handlers() < kHandlers; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(f.idle_handlers(), static_cast<std::size_t>(kHandlers));
  deliver({work("1-0"), work("2-0"), work("3-0"), work("4-0")});
  for (int i = 0; i < 400 && f.running() < kHandlers; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(f.running(), static_cast<std::size_t>(kHandlers)) << "an entry waits behind a long task";
  release.set_value();
  std::set<std::string> ids;
  for (auto& t : taken) ids.insert(t.get());
  EXPECT_EQ(ids, (std::set<std::string>{"1-0", "2-0", "3-0", "4-0"}));
}

TEST_F(InFlightTest, SuspectsRunOneAtATimeBesideFreshWork) {
  deliver({work("1-0", Origin::reclaimed), work("2-0", Origin::replayed), work("3-0")});
  auto a = f.take();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->key.id, "1-0");
  EXPECT_EQ(f.started(a->key, 1), StartVerdict::run);
  EXPECT_EQ(take_id(), "3-0");       // 2-0 waits: a suspect is running
  EXPECT_EQ(f.reclaim_room(4), 0u);  // and the reclaimer takes none while one waits
  auto b = f.finish_and_take(Completion{a->key, Outcome::ack, {}}, true);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->key.id, "2-0");
}

// With max_deliveries, suspects run side by side (a restarted worker resumes its own work with
// its full concurrency), but one whose next start may be its last runs with no other suspect.
TEST(InFlightSuspects, RunSideBySideButALastChanceRunsAlone) {
  Metrics metrics;
  InFlight f{8, metrics, false, 5};
  Work last = work("3-0", Origin::reclaimed);
  last.deliveries = 4;  // started 4 times: a 5th start is its last
  std::vector<Work> v{work("1-0", Origin::replayed), work("2-0", Origin::replayed), last, work("4-0")};
  f.deliver(v);
  auto a = f.take();
  auto b = f.take();
  auto c = f.take();
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->key.id, "1-0");
  EXPECT_EQ(b->key.id, "2-0");  // beside 1-0
  EXPECT_EQ(c->key.id, "4-0");  // 3-0 waits until no other suspect runs
  f.not_run(b->key, true);
  auto d = f.finish_and_take(Completion{a->key, Outcome::ack, {}}, true);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->key.id, "3-0");
  // While it runs, no other suspect starts beside it.
  std::vector<Work> more{work("5-0", Origin::reclaimed)};
  f.deliver(more);
  auto next = std::async(std::launch::async, [&] { return f.take(); });
  EXPECT_EQ(next.wait_for(200ms), std::future_status::timeout);
  f.not_run(d->key, true);
  ASSERT_EQ(next.wait_for(5s), std::future_status::ready);
  const auto e = next.get();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->key.id, "5-0");
  f.stop();
}

TEST_F(InFlightTest, ReclaimRoomIsCappedByPrefetchAndTheCap) {
  EXPECT_EQ(f.reclaim_room(4), 4u);
  deliver({work("1-0"), work("2-0"), work("3-0"), work("4-0"), work("5-0"), work("6-0")});
  EXPECT_EQ(f.reclaim_room(4), 2u);  // prefetch 8, 6 held
  f.stop();
  EXPECT_EQ(f.reclaim_room(4), 0u);
}

TEST_F(InFlightTest, LostEntriesAreSkippedAndCounted) {
  deliver({work("1-0"), work("2-0")});
  EXPECT_EQ(f.lost(0, {"1-0", "9-9"}), 1u);
  EXPECT_EQ(f.lost(0, {"1-0"}), 0u);  // counted once
  EXPECT_EQ(take_id(), "2-0");
  EXPECT_EQ(metrics.skipped.load(), 1u);
  EXPECT_EQ(f.held_count(), 1u);
}

TEST_F(InFlightTest, AnEntryDeliveredAgainRunsFromItsNewDelivery) {
  deliver({work("1-0"), work("2-0")});
  f.completed({EntryKey{0, "1-0"}});          // forgotten while still queued
  deliver({work("1-0", Origin::reclaimed)});  // ... and delivered again
  EXPECT_EQ(take_id(), "2-0");                // the stale copy of 1-0 is skipped
  auto w = f.take();
  ASSERT_TRUE(w);
  EXPECT_EQ(w->key.id, "1-0");
  EXPECT_EQ(w->origin, Origin::reclaimed);
  EXPECT_EQ(metrics.skipped.load(), 1u);
}

TEST_F(InFlightTest, GoneUnstartedEntryIsNotRunAndForgottenOnceDeadLettered) {
  deliver({work("1-0"), work("2-0")});
  const auto fields = f.gone(0, {"1-0"});
  ASSERT_EQ(fields.size(), 1u);
  ASSERT_TRUE(fields[0]);
  EXPECT_EQ(fields[0]->at(0).second, "t-1-0");
  EXPECT_FALSE(f.gone(0, {"1-0"})[0]);  // reported once
  EXPECT_EQ(take_id(), "2-0");          // 1-0 skipped
  EXPECT_EQ(f.held_count(), 2u);        // kept until its record is written
  EXPECT_TRUE(f.due_for_lease(0, Clock::now()) == std::vector<std::string>{"2-0"});
  f.orphaned(EntryKey{0, "1-0"}, "100-0");
  EXPECT_EQ(f.held_count(), 1u);
}

TEST_F(InFlightTest, GoneRunningEntryKeepsItsRecordForItsCompletion) {
  deliver({work("1-0")});
  auto w = f.take();
  ASSERT_TRUE(w);
  ASSERT_TRUE(f.gone(0, {"1-0"})[0]);
  f.orphaned(w->key, "100-0");
  const auto fate = f.fates({Completion{w->key, Outcome::ack, {}}});
  ASSERT_EQ(fate.size(), 1u);
  EXPECT_TRUE(fate[0].held);
  EXPECT_TRUE(fate[0].running);
  EXPECT_EQ(fate[0].orphan_id, "100-0");
  // Its success is the completer's to write (it deletes the record), not the fetcher's.
  f.stop();  // so that finish_and_take does not wait for more work
  EXPECT_FALSE(f.finish_and_take(Completion{w->key, Outcome::ack, {}}, false));
  std::vector<EntryKey> acks;
  f.take_acks(acks, 0);
  EXPECT_TRUE(acks.empty());
  std::vector<Completion> out;
  InFlight::Writes marks;
  f.wait_completions(out, marks, Clock::now());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].key.id, "1-0");
}

TEST_F(InFlightTest, SuccessesGoToTheFetcherAndCountAsRoom) {
  deliver({work("1-0"), work("2-0"), work("3-0"), work("4-0"), work("5-0"), work("6-0")});
  std::vector<std::optional<Work>> running;
  for (int i = 0; i < 6; ++i) running.push_back(f.take());
  // 6 held, low water 4: no room until two succeed.
  std::stop_source stop;
  std::thread waiter([&] { EXPECT_TRUE(f.wait_for_room(stop.get_token())); });
  // Each handler then waits for more work, until stop().
  std::thread h0([&] {
    EXPECT_FALSE(f.finish_and_take(Completion{running[0]->key, Outcome::ack, {}}, false));
  });
  std::thread h1([&] {
    EXPECT_FALSE(f.finish_and_take(Completion{running[1]->key, Outcome::ack, {}}, false));
  });
  waiter.join();
  std::vector<EntryKey> acks;
  while (acks.size() < 2) f.take_acks(acks, 0);  // both handlers may not have pushed yet
  f.acks_written(acks);
  EXPECT_EQ(f.held_count(), 4u);
  f.stop();
  h0.join();
  h1.join();
}

TEST_F(InFlightTest, UnstartedEntriesAreReleasedWithTheirOrigin) {
  deliver({work("1-0"), work("2-0", Origin::reclaimed), work("3-0")});
  EXPECT_EQ(take_id(), "1-0");  // running: not released
  auto un = f.unstarted();
  std::sort(un.begin(), un.end(), [](const Unstarted& a, const Unstarted& b) { return a.key.id < b.key.id; });
  ASSERT_EQ(un.size(), 2u);
  EXPECT_EQ(un[0].key.id, "2-0");
  EXPECT_EQ(un[0].count, -1);  // a suspect keeps its count
  EXPECT_EQ(un[1].key.id, "3-0");
  EXPECT_EQ(un[1].count, 0);  // a fresh one never ran
}

TEST_F(InFlightTest, ASuspectWhoseStartRacesTheStopIsPutBackWithItsCount) {
  Work w = work("1-0", Origin::reclaimed);
  w.deliveries = 3;
  deliver({w});
  auto taken = f.take();
  ASSERT_TRUE(taken);
  f.stop();  // while its start script was on the way (and raised the count to 4)
  EXPECT_EQ(f.started(taken->key, 3), StartVerdict::put_back);
  EXPECT_TRUE(f.wait_idle(Clock::now()));  // nothing runs
  const auto un = f.unstarted();
  ASSERT_EQ(un.size(), 1u);
  EXPECT_EQ(un[0].count, 3);  // released as if never started
}

TEST_F(InFlightTest, RetriesAndDeadLettersAreWrittenOnceNothingElseRuns) {
  deliver({work("1-0")});
  auto w = f.take();
  ASSERT_TRUE(w);
  std::thread completer([&] {
    std::vector<Completion> out;
    InFlight::Writes marks;
    EXPECT_TRUE(f.wait_completions(out, marks, Clock::now() + 10s));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].outcome, Outcome::retry);
  });
  std::thread handler([&] {
    EXPECT_FALSE(f.finish_and_take(Completion{w->key, Outcome::retry, {}}, false));
  });
  completer.join();
  f.stop();
  handler.join();
}

TEST_F(InFlightTest, IdleWaitEndsWhenHandlersFinishOrWhenCut) {
  EXPECT_TRUE(f.wait_idle(Clock::now()));
  deliver({work("1-0")});
  ASSERT_TRUE(f.take());
  EXPECT_FALSE(f.wait_idle(Clock::now() + 20ms));
  std::thread cut([&] { f.end_idle_wait(); });
  EXPECT_FALSE(f.wait_idle(Clock::now() + 60s));  // returns at once when cut
  cut.join();
}

}  // namespace

namespace {

Work level_work(std::uint16_t level, const std::string& id) {
  Work w = work(id);
  w.key.stream = level;
  return w;
}

TEST(InFlightLevels, ByLevelAMoreImportantEntryRunsFirstAndEachLevelStaysInOrder) {
  Metrics metrics;
  InFlight f{16, metrics, true};
  auto first = works({level_work(1, "n1"), level_work(2, "l1"), level_work(1, "n2")});
  f.deliver(first);
  auto second = works({level_work(0, "h1"), level_work(1, "n3"), level_work(0, "h2")});
  f.deliver(second);
  std::vector<std::string> order;
  for (int i = 0; i < 6; ++i) {
    const auto w = f.take();
    f.entering(
        *w,
        std::make_shared<TaskControl>());  // as the executor does before the handler: see the gate test below
    order.push_back(w->key.id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"h1", "h2", "n1", "n2", "n3", "l1"}));
}

TEST(InFlightLevels, ByLevelALessImportantEntryIsNotHandedOutBeforeTheMoreImportantOneIsCalled) {
  // A handler thread that took a high entry can lose its CPU before its handler is called;
  // the normal entries behind it wait for that call, not just for the take.
  Metrics metrics;
  InFlight f{16, metrics, true};
  auto ws = works({level_work(0, "h1"), level_work(1, "n1"), level_work(1, "n2")});
  f.deliver(ws);
  const auto high = f.take();
  ASSERT_EQ(high->key.id, "h1");
  EXPECT_TRUE(high->gates);
  std::atomic<bool> took{false};
  std::thread other([&] {
    const auto w = f.take();
    took = true;
    EXPECT_EQ(w->key.id, "n1");
    EXPECT_FALSE(w->gates);  // nothing less important waits behind it
    f.entering(*w, std::make_shared<TaskControl>());
  });
  std::this_thread::sleep_for(50ms);  // long enough for the other thread to take if it could
  EXPECT_FALSE(took.load());
  f.entering(*high, std::make_shared<TaskControl>());
  other.join();
  EXPECT_TRUE(took.load());
  // A completion lifts the gate too (a handler that never ran: a rate limit, a dead letter).
  auto more = works({level_work(0, "h2")});
  f.deliver(more);
  const auto h2 = f.take();
  ASSERT_EQ(h2->key.id, "h2");
  EXPECT_TRUE(h2->gates);
  const auto next = f.finish_and_take(Completion{h2->key, Outcome::ack, {}}, false);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->key.id, "n2");
}

TEST(InFlightLevels, StopReleasesAThreadWaitingAtAGate) {
  Metrics metrics;
  InFlight f{16, metrics, true};
  auto ws = works({level_work(0, "h1"), level_work(1, "n1")});
  f.deliver(ws);
  const auto high = f.take();
  ASSERT_TRUE(high->gates);
  std::thread other([&] { EXPECT_FALSE(f.take().has_value()); });
  std::this_thread::sleep_for(20ms);
  f.stop();
  other.join();
}

TEST(InFlightLevels, WithoutByLevelTheReadyQueueIsFifo) {
  Metrics metrics;
  InFlight f{16, metrics};
  auto ws = works({level_work(1, "n1"), level_work(0, "h1"), level_work(2, "l1")});
  f.deliver(ws);
  EXPECT_EQ(f.take()->key.id, "n1");
  EXPECT_EQ(f.take()->key.id, "h1");
  EXPECT_EQ(f.take()->key.id, "l1");
}

// ------------------------------------------------------------------ the pace of starts

TEST(StartPace, KeepsAboutTenMillisecondsOfStartsWaitingBetweenOneAndThePrefetch) {
  StartPace pace(64);
  EXPECT_EQ(pace.cap(), 1u);  // nothing measured: no hoard
  auto t = StartPace::Clock::now();
  pace.refresh(t);
  // 10 starts in 5 ms: 2,000/s, so 20 in 10 ms.
  for (int i = 0; i < 10; ++i) pace.started(t + std::chrono::microseconds(400 * i));
  EXPECT_EQ(pace.cap(), 1u);  // the window is not over yet
  t += 5ms;
  pace.refresh(t);
  EXPECT_EQ(pace.cap(), 20u);
  // Short tasks: 1,000 starts in the next window (200,000/s, averaged with 2,000/s): the prefetch.
  for (int i = 0; i < 1000; ++i) pace.started(t + std::chrono::microseconds(i * 4));
  t += 5ms;
  pace.refresh(t);
  EXPECT_EQ(pace.cap(), 64u);
  // Then an idle second and one start: long tasks now, so one waits.
  t += 1s;
  pace.started(t);
  EXPECT_EQ(pace.cap(), 1u);
}

TEST(StartPace, AReadIsWorthItWhenHalfOfWhatMayWaitIsFree) {
  EXPECT_TRUE(StartPace::worth_reading(0, 1));
  EXPECT_FALSE(StartPace::worth_reading(1, 1));
  EXPECT_TRUE(StartPace::worth_reading(5, 10));
  EXPECT_FALSE(StartPace::worth_reading(6, 10));
}

TEST_F(InFlightTest, AReadBringsNoMoreThanTheIdleHandlersAndThePaceWant) {
  std::vector<EntryKey> acks;
  EXPECT_EQ(f.take_acks(acks, 0), 1u);  // no handler waits, nothing measured: one
  deliver({work("1-0")});
  EXPECT_EQ(f.take_acks(acks, 0), 0u);  // it waits unstarted already
  std::vector<std::thread> handlers;
  std::atomic<int> taken{0};
  for (int i = 0; i < 3; ++i)
    handlers.emplace_back([&] {
      if (f.take()) ++taken;
    });
  // One of the three takes 1-0, two wait for work: room for those two and the pace's one (or
  // a little more, once a slow machine's first window of starts is over).
  while (f.take_acks(acks, 0) < 3u) std::this_thread::yield();
  EXPECT_LE(f.take_acks(acks, 0), 4u);  // half the prefetch at most
  EXPECT_EQ(f.take_acks(acks, 8), 0u);  // a read's worth on its way already: nothing more
  std::stop_source stop;
  EXPECT_TRUE(f.wait_to_read(stop.get_token()));
  f.stop();
  for (auto& h : handlers) h.join();
  EXPECT_EQ(taken, 1);
}

}  // namespace
