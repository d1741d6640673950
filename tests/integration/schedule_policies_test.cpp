// SPDX-License-Identifier: MIT
// The per-schedule policies of ScheduledTaskOptions against a private redis-server: priority,
// retention, start and end, limit, jitter, overlap (skip, buffer_one), catch-up of every missed
// tick of a window, and Schedules::backfill. A fake clock drives the Schedulers; where nothing
// is supposed to happen, a second schedule of the same instances ("pulse", handled after the
// names before it in each wake-up: names are handled in order) shows that the instances have
// handled the time the clock was moved to.
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "gate.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "scheduler/jitter.hpp"
#include "scheduler_fixture.hpp"
#include "utc_time.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {
namespace policies {

using namespace std::chrono;
using TimePoint = system_clock::time_point;

std::string id_at(const std::string& name, TimePoint tick) { return name + "@" + detail::format_tick(tick); }
TimePoint minute(int m, int s = 0) { return at(2026, 1, 1, 0, m, s); }

class SchedulePoliciesTest : public ::testing::Test {
 protected:
  RedisServer server;
  Client client{server.url()};
  std::string stream = unique_key();
  FakeClock clock{minute(1, 1)};
  std::vector<std::unique_ptr<Scheduler>> schedulers;

  ~SchedulePoliciesTest() override {
    for (auto& s : schedulers) s->stop();
  }

  SchedulerOptions options() const {
    return {.queue = {.connection = {.url = server.url(),
                                     .backoff_base = milliseconds(10),
                                     .backoff_max = milliseconds(50)},
                      .stream = stream},
            .misfire_grace = seconds(10),
            .clock = clock.fn(),
            .max_wait = milliseconds(5)};
  }
  /// `n` instances, each with schedule `name` (every minute, `o`) and, unless `pulse` is false,
  /// "pulse" (every minute), started.
  void start(int n, const std::string& name, const ScheduledTaskOptions& o, bool pulse = true) {
    for (int i = 0; i < n; ++i) {
      auto s = std::make_unique<Scheduler>(options());
      s->add(name, Schedule::cron("* * * * *"), "report", "{}", o);
      if (pulse) s->add("pulse", Schedule::cron("* * * * *"), "pulse", "{}");
      s->start();
      schedulers.push_back(std::move(s));
    }
  }
  void stop_all() {
    for (auto& s : schedulers) s->stop();
    schedulers.clear();
  }
  /// The task ids in `key` (a stream), in order; of schedule `name` only when given.
  std::vector<std::string> ids(const std::string& key, const std::string& name = "") {
    std::vector<std::string> out;
    for (const auto& [id, fields] : client.xrange(key)) {
      const std::string task_id = Client::get(fields, "task_id");
      if (name.empty() || task_id.rfind(name + "@", 0) == 0) out.push_back(task_id);
    }
    return out;
  }
  std::vector<std::string> ids_of(const std::string& name) { return ids(stream, name); }
  std::string hget(const std::string& key, const std::string& field) {
    const detail::Reply r = client.cmd({"HGET", key, field});
    return r.view().is_nil() ? "" : std::string(r.view().check().str());
  }
  std::string record(const std::string& name, const std::string& field) {
    return hget(stream + ":sched:" + name, field);
  }
  std::string task_state(const std::string& task_id) { return hget(stream + ":task:" + task_id, "state"); }
  static std::string ms(TimePoint t) {
    return std::to_string(duration_cast<milliseconds>(t.time_since_epoch()).count());
  }
  /// Moves the clock to `t` and waits until the pulse's record holds its tick at or before it:
  /// by then the instance that handled it has handled the schedules named before "pulse" at `t`.
  ::testing::AssertionResult advance(TimePoint t) {
    clock.set(t);
    const std::string tick = ms(floor<minutes>(t));
    if (wait_until([&] { return record("pulse", "tick") == tick; })) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the pulse did not reach " << detail::format_tick(t);
  }
  /// Each instance's enqueued + taken.
  std::vector<std::uint64_t> answered() const {
    std::vector<std::uint64_t> out;
    for (const auto& s : schedulers) out.push_back(s->metrics().enqueued + s->metrics().taken);
    return out;
  }
};

TEST_F(SchedulePoliciesTest, PriorityPutsTheTasksOnTheLevelsStream) {
  start(1, "urgent", {.priority = Priority::high}, false);
  ASSERT_TRUE(wait_until([&] { return schedulers[0]->metrics().enqueued == 1; }));
  const detail::QueueKeys keys = detail::queue_keys(stream);
  EXPECT_EQ(ids(keys.high), (std::vector<std::string>{id_at("urgent", minute(1))}));
  EXPECT_EQ(client.integer({"XLEN", stream}), 0);
}

TEST_F(SchedulePoliciesTest, RetentionTracksTheTasks) {
  start(1, "tracked", {.retention = Retention{.done = hours(2), .dead = hours(3)}}, false);
  ASSERT_TRUE(wait_until([&] { return schedulers[0]->metrics().enqueued == 1; }));
  const std::string id = id_at("tracked", minute(1));
  EXPECT_EQ(Client::get(client.xrange(stream).at(0).second, "retention"), "7200000 10800000");
  EXPECT_EQ(task_state(id), "queued");
  EXPECT_EQ(hget(stream + ":task:" + id, "type"), "report");
  EXPECT_EQ(record("tracked", "running_id"), id);
}

TEST_F(SchedulePoliciesTest, NoTickBeforeStartNorAfterEnd) {
  start(1, "bounded", {.start = minute(3), .end = minute(5)});
  for (int m = 1; m <= 7; ++m) ASSERT_TRUE(advance(minute(m, 1))) << m;
  stop_all();
  EXPECT_EQ(ids_of("bounded"),
            (std::vector<std::string>{id_at("bounded", minute(3)), id_at("bounded", minute(4)),
                                      id_at("bounded", minute(5))}));
}

TEST_F(SchedulePoliciesTest, LimitEnqueuesThatManyTicksAcrossThreeInstances) {
  start(3, "limited", {.limit = 3});
  for (std::uint64_t m = 1; m <= 6; ++m) {
    clock.set(minute(static_cast<int>(m), 1));
    // Each instance answered the pulse's ticks and the limited schedule's first three.
    const std::vector<std::uint64_t> expected(3, m + std::min<std::uint64_t>(m, 3));
    ASSERT_TRUE(wait_until([&] { return answered() == expected; })) << "minute " << m;
  }
  stop_all();
  EXPECT_EQ(ids_of("limited"),
            (std::vector<std::string>{id_at("limited", minute(1)), id_at("limited", minute(2)),
                                      id_at("limited", minute(3))}));
  EXPECT_EQ(record("limited", "enqueued"), "3");
  EXPECT_EQ(record("limited", "tick"), ms(minute(3)));
}

TEST_F(SchedulePoliciesTest, JitterDelaysEachTickByTheSameOffsetOnEveryInstance) {
  // A name whose offset for 00:02 is at least 5 s of the 30 s jitter (the offset is a fixed
  // hash: the same on every run).
  const milliseconds jitter = seconds(30);
  std::string name;
  for (int i = 0; name.empty() && i < 1000; ++i) {
    const std::string candidate = "jittered-" + std::to_string(i);
    if (detail::jitter_offset(candidate, minute(2), jitter) >= seconds(5)) name = candidate;
  }
  ASSERT_FALSE(name.empty()) << "no name's offset is 5 s or more";
  const milliseconds offset = detail::jitter_offset(name, minute(2), jitter);
  ASSERT_LT(offset, jitter);
  start(2, name, {.start = minute(2), .jitter = jitter});
  ASSERT_TRUE(wait_until([&] { return answered() == std::vector<std::uint64_t>{1, 1}; }));  // pulse 00:01
  // Just before 00:02 + offset: both instances have handled that time (the pulse of 00:02).
  clock.set(minute(2) + offset - milliseconds(1));
  ASSERT_TRUE(wait_until([&] { return answered() == std::vector<std::uint64_t>{2, 2}; }));
  EXPECT_EQ(ids_of(name), std::vector<std::string>{});
  clock.set(minute(2) + offset);
  ASSERT_TRUE(wait_until([&] { return answered() == std::vector<std::uint64_t>{3, 3}; }));
  stop_all();
  const auto entries = client.xrange(stream);
  const auto& last = entries.back().second;
  EXPECT_EQ(Client::get(last, "task_id"), id_at(name, minute(2)));  // the id is the tick's
  EXPECT_EQ(Client::get(last, "created_at"), detail::format_timestamp(minute(2) + offset));
}

TEST_F(SchedulePoliciesTest, OverlapSkipSkipsTheTicksWhileThePreviousTaskRuns) {
  Gate gate;
  std::mutex m;
  std::vector<std::string> ran;
  RunningConsumer consumer({.connection = {.url = server.url()}, .stream = stream, .block = milliseconds(50)},
                           [&](Consumer& c) {
                             c.on("report", [&](const Task& task) {
                               if (task.id() == id_at("slow", minute(1))) gate.pass(task.id());
                               std::lock_guard lock(m);
                               ran.push_back(task.id());
                             });
                             c.on("pulse", [](const Task&) {});
                           });
  const auto release = gate.opens_on_exit();
  start(2, "slow", {.overlap = Overlap::skip});
  ASSERT_NE(gate.arrived(), "");  // 00:01 runs, held in its handler
  ASSERT_TRUE(advance(minute(2, 1)));
  ASSERT_TRUE(wait_until([&] { return record("slow", "tick") == ms(minute(2)); }));
  EXPECT_EQ(record("slow", "outcome"), "skipped");
  EXPECT_EQ(record("slow", "running_id"), id_at("slow", minute(1)));
  gate.open();
  ASSERT_TRUE(wait_until([&] { return task_state(id_at("slow", minute(1))) == "done"; }));
  ASSERT_TRUE(advance(minute(3, 1)));
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return ran.size() == 2;
  }));
  stop_all();
  consumer.stop();
  EXPECT_EQ(ran, (std::vector<std::string>{id_at("slow", minute(1)), id_at("slow", minute(3))}));
  EXPECT_EQ(record("slow", "outcome"), "enqueued");
}

TEST_F(SchedulePoliciesTest, OverlapBufferOneRunsOneTickOnceThePreviousTaskEnded) {
  Gate gate;
  std::mutex m;
  std::vector<std::string> ran;
  RunningConsumer consumer({.connection = {.url = server.url()}, .stream = stream, .block = milliseconds(50)},
                           [&](Consumer& c) {
                             c.on("report", [&](const Task& task) {
                               if (task.id() == id_at("slow", minute(1))) gate.pass(task.id());
                               std::lock_guard lock(m);
                               ran.push_back(task.id());
                             });
                             c.on("pulse", [](const Task&) {});
                           });
  const auto release = gate.opens_on_exit();
  start(2, "slow", {.overlap = Overlap::buffer_one});
  ASSERT_NE(gate.arrived(), "");
  ASSERT_TRUE(advance(minute(2, 1)));  // buffered
  ASSERT_TRUE(wait_until([&] { return record("slow", "outcome") == "buffered"; }));
  EXPECT_EQ(record("slow", "buffered"), ms(minute(2)));
  ASSERT_TRUE(advance(minute(3, 1)));  // one is buffered already: skipped
  ASSERT_TRUE(wait_until([&] { return record("slow", "tick") == ms(minute(3)); }));
  EXPECT_EQ(record("slow", "outcome"), "skipped");
  gate.open();
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return ran.size() == 2;
  }));
  ASSERT_TRUE(wait_until([&] { return task_state(id_at("slow", minute(2))) == "done"; }));
  EXPECT_EQ(record("slow", "buffered"), "");
  ASSERT_TRUE(advance(minute(4, 1)));
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return ran.size() == 3;
  }));
  stop_all();
  consumer.stop();
  EXPECT_EQ(ran, (std::vector<std::string>{id_at("slow", minute(1)), id_at("slow", minute(2)),
                                           id_at("slow", minute(4))}));
  EXPECT_EQ(record("slow", "enqueued"), "3");
}

TEST_F(SchedulePoliciesTest, AllWithinEnqueuesEveryMissedTickOfTheWindowOnceInOrder) {
  const ScheduledTaskOptions o{.catch_up = CatchUp::all_within(minutes(10))};
  start(1, "catching", o, false);
  ASSERT_TRUE(wait_until([&] { return ids_of("catching").size() == 1; }));  // 00:01, on time
  stop_all();
  // Every instance down from 00:01:01 to 00:20:30: 00:02 ... 00:20 missed; the window (10
  // minutes) holds 00:11 ... 00:20.
  clock.set(minute(20, 30));
  start(2, "catching", o, false);
  std::vector<std::string> expected{id_at("catching", minute(1))};
  for (int m = 11; m <= 20; ++m) expected.push_back(id_at("catching", minute(m)));
  ASSERT_TRUE(wait_until([&] { return ids_of("catching").size() >= expected.size(); }));
  clock.set(minute(21, 1));
  expected.push_back(id_at("catching", minute(21)));
  ASSERT_TRUE(wait_until([&] { return ids_of("catching").size() >= expected.size(); }));
  stop_all();
  EXPECT_EQ(ids_of("catching"), expected);
}

TEST_F(SchedulePoliciesTest, BackfillEnqueuesTheTicksOfARangeOnce) {
  Schedules schedules({.connection = {.url = server.url()}, .stream = stream}, clock.fn());
  clock.set(minute(10, 1));
  ASSERT_EQ(schedules.upsert("nightly", Schedule::cron("* * * * *"), "report", "{}"), UpsertOutcome::created);
  start(1, "nightly", {}, false);  // 00:10 is enqueued by the schedule
  ASSERT_TRUE(wait_until([&] { return ids_of("nightly").size() == 1; }));
  stop_all();

  const BackfillResult first = schedules.backfill("nightly", minute(7), minute(10));
  EXPECT_EQ(first.enqueued,
            (std::vector<std::string>{id_at("nightly", minute(7)), id_at("nightly", minute(8)),
                                      id_at("nightly", minute(9))}));
  EXPECT_EQ(first.already, 1);  // 00:10
  const BackfillResult second = schedules.backfill("nightly", minute(5), minute(9, 30));
  EXPECT_EQ(second.enqueued,
            (std::vector<std::string>{id_at("nightly", minute(5)), id_at("nightly", minute(6))}));
  EXPECT_EQ(second.already, 3);
  const BackfillResult third = schedules.backfill("nightly", minute(5), minute(10));
  EXPECT_TRUE(third.enqueued.empty());
  EXPECT_EQ(third.already, 6);
  EXPECT_EQ(ids_of("nightly"),
            (std::vector<std::string>{id_at("nightly", minute(10)), id_at("nightly", minute(7)),
                                      id_at("nightly", minute(8)), id_at("nightly", minute(9)),
                                      id_at("nightly", minute(5)), id_at("nightly", minute(6))}));
  EXPECT_EQ(record("nightly", "tick"), ms(minute(10)));  // backfills do not move the record

  EXPECT_THROW(schedules.backfill("nightly", minute(9), minute(8)), ConfigError);
  EXPECT_THROW(schedules.backfill("nobody", minute(1), minute(2)), ConfigError);
  EXPECT_THROW(schedules.backfill("nightly", minute(10), minute(12)), ConfigError);  // after now
  clock.set(minute(0) + hours(18));
  EXPECT_THROW(schedules.backfill("nightly", minute(0), minute(0) + hours(17)), ConfigError);  // 1021 ticks
}

TEST_F(SchedulePoliciesTest, ATickBackfilledBeforeItsJitterPassedIsNotEnqueuedAgainByTheScheduler) {
  // The 00:02 tick is due, but its offset has not passed: an operator backfills it meanwhile.
  const milliseconds jitter = seconds(30);
  std::string name;
  for (int i = 0; name.empty() && i < 1000; ++i) {
    const std::string candidate = "jittered-" + std::to_string(i);
    if (detail::jitter_offset(candidate, minute(2), jitter) >= seconds(5)) name = candidate;
  }
  ASSERT_FALSE(name.empty()) << "no name's offset is 5 s or more";
  const milliseconds offset = detail::jitter_offset(name, minute(2), jitter);
  start(2, name, {.start = minute(2), .jitter = jitter});
  ASSERT_TRUE(wait_until([&] { return answered() == std::vector<std::uint64_t>{1, 1}; }));  // pulse 00:01
  clock.set(minute(2) + offset - milliseconds(1));
  ASSERT_TRUE(wait_until([&] { return answered() == std::vector<std::uint64_t>{2, 2}; }));  // pulse 00:02
  Schedules schedules({.connection = {.url = server.url()}, .stream = stream}, clock.fn());
  EXPECT_EQ(schedules.backfill(name, minute(2), minute(2)).enqueued,
            std::vector<std::string>{id_at(name, minute(2))});
  clock.set(minute(2) + offset);  // the Schedulers' turn: they find it taken
  ASSERT_TRUE(wait_until([&] { return answered() == std::vector<std::uint64_t>{3, 3}; }));
  stop_all();
  EXPECT_EQ(ids_of(name), std::vector<std::string>{id_at(name, minute(2))});
}

/// The ACL grants docs/scheduling.md ("Keys") lists for a scheduler's user, `<stream>` replaced.
std::vector<std::string> documented_scheduler_grants(const std::string& stream) {
  std::ifstream in(std::string(STREAMQ_SOURCE_DIR) + "/docs/scheduling.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t from = doc.find("ACL user needs");
  const std::string paragraph = doc.substr(from, doc.find("\n\n", from) - from);
  std::vector<std::string> grants;
  for (std::size_t open = paragraph.find('`'); open != std::string::npos;) {
    const std::size_t close = paragraph.find('`', open + 1);
    std::istringstream words(paragraph.substr(open + 1, close - open - 1));
    for (std::string w; words >> w;) {
      for (std::size_t at; (at = w.find("<stream>")) != std::string::npos;) w.replace(at, 8, stream);
      grants.push_back(w);
    }
    open = paragraph.find('`', close + 1);
  }
  return grants;
}

TEST_F(SchedulePoliciesTest, TheDocumentedAclGrantsAreEnoughForThePolicies) {
  if (!client.redis_at_least(7, 0)) GTEST_SKIP() << "%R~ key patterns need Redis 7";
  std::vector<std::string> setuser{"ACL", "SETUSER", "sq-scheduler", "reset", "on", ">scheduler-secret"};
  const std::vector<std::string> grants = documented_scheduler_grants(stream);
  ASSERT_GT(grants.size(), 10u);
  setuser.insert(setuser.end(), grants.begin(), grants.end());
  const detail::Reply r = client.cmd(setuser);
  ASSERT_FALSE(r.view().is_error()) << r.view().error();
  SchedulerOptions o = options();
  o.queue.connection.url = "redis://sq-scheduler:scheduler-secret@127.0.0.1:" + std::to_string(server.port());
  Scheduler s(o);
  s.add("guarded", Schedule::cron("* * * * *"), "report", "{}",
        {.priority = Priority::high, .limit = 5, .jitter = milliseconds(1), .overlap = Overlap::buffer_one});
  s.start();
  ASSERT_TRUE(wait_until([&] { return s.metrics().enqueued == 1 || s.metrics().errors > 0; }));
  clock.set(minute(2, 1));  // the 00:01 task has not run: buffered
  ASSERT_TRUE(
      wait_until([&] { return record("guarded", "buffered") == ms(minute(2)) || s.metrics().errors > 0; }));
  s.stop();
  EXPECT_EQ(s.metrics().errors, 0u);
  EXPECT_EQ(task_state(id_at("guarded", minute(1))), "queued");
}

}  // namespace policies
}  // namespace
}  // namespace streamq::test
