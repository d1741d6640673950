// SPDX-License-Identifier: MIT
// Fair queues per tenant on a real server (docs/tenants.md): tenants served in turn and by
// weight, a tenant's concurrency limit across workers, its depth limit, a retry back to its
// tenant, and no keys left once a tenant has nothing left.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "consumer_fixture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class TenantsTest : public ConsumerTest {
 protected:
  Producer big_producer() const {
    return Producer({.connection = {.url = server.url()}, .stream = stream, .max_len = 100000});
  }
  /// Enqueues `n` tasks of type "work" for `tenant`, in one batch.
  static void enqueue_for(Producer& p, const std::string& tenant, int n) {
    std::vector<TaskSpec> tasks;
    for (int i = 0; i < n; ++i) tasks.push_back({"work", nlohmann::json{{"t", tenant}}, {.tenant = tenant}});
    p.enqueue_batch(tasks);
  }
  /// The tenant of every "work" task, in the order the handlers start them.
  class StartLog {
   public:
    void add(const Task& t) {
      const std::lock_guard lock(m_);
      starts_.push_back(t.json()["t"].get<std::string>());
    }
    std::vector<std::string> starts() const {
      const std::lock_guard lock(m_);
      return starts_;
    }
    std::size_t size() const {
      const std::lock_guard lock(m_);
      return starts_.size();
    }

   private:
    mutable std::mutex m_;
    std::vector<std::string> starts_;
  };
  /// How many of the first `n` starts were of each tenant.
  static std::map<std::string, int> first(const std::vector<std::string>& starts, std::size_t n) {
    std::map<std::string, int> out;
    for (std::size_t i = 0; i < std::min(n, starts.size()); ++i) ++out[starts[i]];
    return out;
  }
  /// The keys of the queue's tenants (their backlogs, the ready and waiting sets, slots, rate
  /// windows), but not their settings nor what the queue keeps whatever its tenants (the pass,
  /// the consumers' lease and group).
  std::vector<std::string> tenant_keys() {
    std::vector<std::string> out;
    for (const char* pattern : {":tenant:*", ":tenants:*"}) {
      const detail::Reply r = client.cmd({"KEYS", stream + pattern});
      for (std::size_t i = 0; i < r.view().size(); ++i) {
        std::string k(r.view()[i].str());
        if (k == stream + ":tenants:pass" || k == stream + ":tenants:worker" ||
            k.starts_with(stream + ":tenants:config:") || k == stream + ":tenants:defaults") {
          continue;
        }
        out.push_back(k);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  /// One worker that runs one task at a time, reading one at a time: its start order is the
  /// order the dispatch moved the tasks in.
  ConsumerOptions one_at_a_time() const {
    auto o = options();
    o.concurrency = 1;
    o.prefetch = 1;
    return o;
  }
};

// A tenant with a big backlog gets its turn and no more: the others' tasks, enqueued behind
// it, start within the first rounds.
TEST_F(TenantsTest, TenantsThatHaveWorkAreServedInTurn) {
  Producer p = big_producer();
  enqueue_for(p, "a", 60);
  enqueue_for(p, "b", 3);
  enqueue_for(p, "c", 3);
  EXPECT_EQ(xlen(stream), 0) << "a tenant's tasks wait in its backlog";
  StartLog log;
  RunningConsumer rc(one_at_a_time(), [&](Consumer& c) { c.on("work", [&](const Task& t) { log.add(t); }); });
  ASSERT_TRUE(wait_until([&] { return log.size() == 66; }, 20s));
  const auto starts = log.starts();
  EXPECT_EQ(first(starts, 9), (std::map<std::string, int>{{"a", 3}, {"b", 3}, {"c", 3}}));
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << "a tenant with nothing left leaves no keys: " << ::testing::PrintToString(tenant_keys());
}

// A tenant of weight 3 gets three turns to one of weight 1.
TEST_F(TenantsTest, ATenantsWeightIsItsShareOfTheTurns) {
  client.cmd({"HSET", stream + ":tenants:config:b", "weight", "3"}).view().check();
  Producer p = big_producer();
  enqueue_for(p, "a", 40);
  enqueue_for(p, "b", 40);
  StartLog log;
  RunningConsumer rc(one_at_a_time(), [&](Consumer& c) { c.on("work", [&](const Task& t) { log.add(t); }); });
  ASSERT_TRUE(wait_until([&] { return log.size() == 80; }, 20s));
  const auto counts = first(log.starts(), 40);
  EXPECT_GE(counts.at("b"), 29) << counts.at("a") << " of a";
  EXPECT_LE(counts.at("b"), 31) << counts.at("a") << " of a";
}

// A tenant's concurrency limit holds across every worker, while tenants without one run
// beside it.
TEST_F(TenantsTest, ATenantsConcurrencyLimitHoldsAcrossWorkers) {
  client.cmd({"HSET", stream + ":tenants:config:a", "concurrency", "2"}).view().check();
  Producer p = big_producer();
  enqueue_for(p, "a", 20);
  enqueue_for(p, "b", 20);
  std::atomic<int> running_a{0}, most_a{0}, running_b{0}, most_b{0}, done{0};
  const auto setup = [&](Consumer& c) {
    c.on("work", [&](const Task& t) {
      const bool a = t.json()["t"] == "a";
      std::atomic<int>& running = a ? running_a : running_b;
      std::atomic<int>& most = a ? most_a : most_b;
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(30ms);
      --running;
      ++done;
    });
  };
  auto o = options();
  o.concurrency = 4;
  RunningConsumer w1(o, setup);
  RunningConsumer w2(o, setup);
  ASSERT_TRUE(wait_until([&] { return done == 40; }, 30s));
  EXPECT_EQ(most_a, 2);
  EXPECT_GT(most_b, 2) << "the limit is the tenant's, not the queue's";
  EXPECT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << ::testing::PrintToString(tenant_keys());
}

// A tenant's depth limit refuses that tenant's tasks only.
TEST_F(TenantsTest, AFullTenantRefusesOnlyItsOwnTasks) {
  client.cmd({"HSET", stream + ":tenants:config:a", "max_len", "2"}).view().check();
  Producer p = producer();
  p.enqueue("work", "{}", {.tenant = "a"});
  p.enqueue("work", "{}", {.tenant = "a"});
  EXPECT_THROW(p.enqueue("work", "{}", {.tenant = "a"}), QueueFullError);
  EXPECT_NO_THROW(p.enqueue("work", "{}", {.tenant = "b"}));
  EXPECT_NO_THROW(p.enqueue("work", "{}"));
}

// A failed task's retry goes back to its tenant's backlog, and runs in its turn.
TEST_F(TenantsTest, ARetryGoesBackToItsTenant) {
  Producer p = producer();
  const std::string id = p.enqueue("flaky", "{}", {.tenant = "a"});
  std::atomic<int> runs{0};
  RunningConsumer rc(options(), [&](Consumer& c) {
    c.on("flaky", [&](const Task&) {
      if (++runs == 1) throw std::runtime_error("first attempt fails");
    });
  });
  ASSERT_TRUE(wait_until([&] { return runs == 2; }, 10s));
  ASSERT_TRUE(wait_until([&] { return tenant_keys().empty(); }, 5s))
      << ::testing::PrintToString(tenant_keys());
  EXPECT_EQ(xlen(dlq), 0);
}

TEST_F(TenantsTest, ATenantNameIsCheckedBeforeAnythingIsWritten) {
  Producer p = producer();
  EXPECT_THROW(p.enqueue("work", "{}", {.tenant = std::string(257, 'x')}), ConfigError);
  EXPECT_THROW(p.enqueue("work", "{}", {.tenant = std::string("a\0b", 3)}), ConfigError);
  EXPECT_THROW(p.enqueue("work", "{}", {.extra_fields = {{"streamq_tenant", "a"}}}), ConfigError);
  EXPECT_TRUE(tenant_keys().empty());
}

}  // namespace
}  // namespace streamq::test
