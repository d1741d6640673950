// SPDX-License-Identifier: MIT
// A fixture for the Scheduler's tests: a private redis-server (appendonly, so a test can
// restart it on its data), a fake clock every Scheduler of a test shares, and readers of the
// queue's tasks and of a schedule's record.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"
#include "utc_time.hpp"

namespace streamq::test {

using TimePoint = std::chrono::system_clock::time_point;

/// A clock the test sets; shared by every Scheduler of a test.
class FakeClock {
 public:
  explicit FakeClock(TimePoint t) : now_(std::make_shared<std::atomic<std::int64_t>>(ticks(t))) {}
  void set(TimePoint t) { now_->store(ticks(t)); }
  std::function<TimePoint()> fn() const {
    return [now = now_] { return TimePoint(std::chrono::system_clock::duration(now->load())); };
  }

 private:
  static std::int64_t ticks(TimePoint t) { return t.time_since_epoch().count(); }
  std::shared_ptr<std::atomic<std::int64_t>> now_;
};

inline SchedulerMetrics sum(const std::vector<std::unique_ptr<Scheduler>>& schedulers) {
  SchedulerMetrics total;
  for (const auto& s : schedulers) {
    const SchedulerMetrics m = s->metrics();
    total.enqueued += m.enqueued;
    total.taken += m.taken;
    total.skipped += m.skipped;
    total.refused += m.refused;
    total.errors += m.errors;
  }
  return total;
}

class SchedulerTest : public ::testing::Test {
 protected:
  RedisServer server{{.appendonly = true}};  // the Redis-down test restarts it on its AOF
  Client client{server.url()};
  std::string stream = unique_key();
  FakeClock clock{at(2026, 1, 1, 0, 0, 30)};

  SchedulerOptions options(MissedTicks missed = MissedTicks::enqueue_once) const {
    return {.queue = {.connection = {.url = server.url(),
                                     .backoff_base = std::chrono::milliseconds(10),
                                     .backoff_max = std::chrono::milliseconds(50)},
                      .stream = stream},
            .missed = missed,
            .misfire_grace = std::chrono::seconds(10),
            .clock = clock.fn(),
            .max_wait = std::chrono::milliseconds(5)};
  }
  std::unique_ptr<Scheduler> every_minute(MissedTicks missed = MissedTicks::enqueue_once) const {
    auto s = std::make_unique<Scheduler>(options(missed));
    s->add("tick", Schedule::cron("* * * * *"), "report", {{"kind", "minutely"}});
    return s;
  }
  std::vector<std::string> task_ids() {
    std::vector<std::string> ids;
    for (const auto& [id, fields] : client.xrange(stream)) ids.push_back(Client::get(fields, "task_id"));
    return ids;
  }
  std::string record(const std::string& name, const char* field) {
    const detail::Reply r = client.cmd({"HGET", stream + ":sched:" + name, field});
    return r.view().is_nil() ? "" : std::string(r.view().check().str());
  }
  static std::string ms(TimePoint t) {
    return std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
  }
};

}  // namespace streamq::test
