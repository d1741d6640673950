// SPDX-License-Identifier: MIT
// The least-privilege ACL roles of docs/operations.md ("ACL roles"), as written there: the
// lines are read from that page, given this test's queue name, and run on a private server.
// Each role does its job through the library and is refused what belongs to the others, with
// a NOPERM ReplyError at once (never a retry loop).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "log_capture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"
#include "wire/keys.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// The `ACL SETUSER sq-<role> ...` lines of docs/operations.md, `task_queue` replaced by `queue`, split into
/// arguments; by role name (producer, worker, stats, operator).
std::map<std::string, std::vector<std::string>> documented_roles(const std::string& queue) {
  std::ifstream in(std::string(STREAMQ_SOURCE_DIR) + "/docs/operations.md");
  std::map<std::string, std::vector<std::string>> roles;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("ACL SETUSER sq-")) continue;
    for (std::size_t at; (at = line.find("task_queue")) != std::string::npos;) line.replace(at, 10, queue);
    std::istringstream words(line);
    std::vector<std::string> args;
    for (std::string w; words >> w;) args.push_back(w);
    roles[args[2].substr(3)] = args;
  }
  return roles;
}

class AclRoles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto roles = documented_roles(queue);
    ASSERT_EQ(roles.size(), 4u) << "the four roles of docs/operations.md";
    for (const auto& [role, args] : roles) {
      const detail::Reply r = admin.cmd(args);
      if (!admin.redis_at_least(7, 0)) {
        // Redis 6.2 has no %R~ read-only key patterns (docs/operations.md says the lines are
        // 7.0 syntax): those lines are refused there, the others taken.
        const bool read_only_patterns =
            std::any_of(args.begin(), args.end(), [](const std::string& a) { return a.starts_with("%R~"); });
        EXPECT_EQ(r.view().is_error(), read_only_patterns) << role;
        continue;
      }
      ASSERT_FALSE(r.view().is_error()) << role << ": " << r.view().error();
    }
  }
  bool supported() { return admin.redis_at_least(7, 0); }
  std::string url(const std::string& role) const {
    return "redis://sq-" + role + ":" + role + "-secret@127.0.0.1:" + std::to_string(server.port());
  }
  /// The first word of a refusal's message.
  static std::string refusal(const std::function<void()>& call) {
    try {
      call();
    } catch (const ReplyError& e) {
      const std::string what = e.what();
      return what.substr(0, what.find(' '));
    } catch (const std::exception& e) {
      return std::string("not a ReplyError: ") + e.what();
    }
    return "accepted";
  }
  static std::string refusal_of(Client& c, std::initializer_list<std::string_view> args) {
    const detail::Reply r = c.cmd(args);
    if (!r.view().is_error()) return "accepted";
    const std::string_view e = r.view().error();
    return std::string(e.substr(0, e.find(' ')));
  }

  RedisServer server;
  Client admin{server.url()};
  std::string queue = unique_key();
};

TEST_F(AclRoles, TheProducerEnqueuesAndCanDoNothingElse) {
  if (!supported()) return;  // (SetUp checked that 6.2 refuses the lines)
  Producer p({.connection = {.url = url("producer")}, .stream = queue});
  p.enqueue("t", R"({})");
  p.enqueue("t", R"({})", {.delay = 1h});
  p.enqueue("t", R"({})", {.unique_for = 1min, .unique_key = "k"});
  // A debounced burst: a cycle started, then a replacement (ZSCORE, ZREM, ZADD, HSET, PEXPIRE).
  const EnqueueOptions debounced{
      .debounce = Debounce{.key = "d", .window = 1h, .mode = DebounceMode::replace_latest}};
  const std::string waiting = p.enqueue("t", R"({"n":1})", debounced);
  EXPECT_EQ(p.enqueue("t", R"({"n":2})", debounced), waiting);
  EXPECT_EQ(admin.integer({"ZCARD", queue + ":delayed"}), 2);  // the delayed task and the debounced one
  std::vector<TaskSpec> batch(100,
                              TaskSpec{.task_type = "t", .payload = "{}"});  // > 64: the refusal mark too
  EXPECT_EQ(p.enqueue_batch(batch).size(), 100u);
  EXPECT_EQ(admin.integer({"XLEN", queue}), 102);
  // A flow: its parent waits in task_queue:flow:<id>, its child joins the parent's pending set.
  p.enqueue_flow(chord({{.task_type = "t", .payload = "{}"}}, {.task_type = "t", .payload = "{}"}));
  EXPECT_EQ(admin.integer({"XLEN", queue}), 103);
  // A batch: opened, joined, closed; closed empty, it enqueues its (tracked) callback at once.
  const std::string joined = p.open_batch();
  p.enqueue("t", R"({})", {.batch = joined});
  EXPECT_TRUE(p.close_batch(joined));
  const std::string empty = p.open_batch(
      {.on_complete =
           TaskSpec{.task_type = "t", .payload = "{}", .options = {.retention = Retention{.done = 1min}}}});
  EXPECT_TRUE(p.close_batch(empty));
  EXPECT_EQ(admin.integer({"XLEN", queue}), 105);

  Client as_producer(url("producer"));
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"XRANGE", queue, "-", "+"},
                                             {"XREADGROUP", "GROUP", "g", "c", "STREAMS", queue, ">"},
                                             {"XACK", queue, "workers", "1-1"},
                                             {"XDEL", queue, "1-1"},
                                             {"DEL", queue},
                                             {"XADD", queue + ":dlq", "*", "a", "b"},
                                             {"XADD", "another-queue", "*", "a", "b"},
                                             {"CONFIG", "GET", "maxmemory"}}) {
    const detail::Reply r = as_producer.cmd(args);
    ASSERT_TRUE(r.view().is_error()) << args[0];
    EXPECT_TRUE(r.view().error().starts_with("NOPERM")) << args[0] << ": " << r.view().error();
  }
  // A worker with the producer's credentials stops at once with NOPERM.
  const auto started = std::chrono::steady_clock::now();
  Consumer wrong({.connection = {.url = url("producer")}, .stream = queue});
  wrong.on("t", [](const Task&) {});
  EXPECT_EQ(refusal([&] { wrong.run(); }), "NOPERM");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "a refusal is not retried";
  Inspector snoop({.connection = {.url = url("producer")}});
  EXPECT_EQ(refusal([&] { snoop.tasks(queue, {}); }), "NOPERM");
}

TEST_F(AclRoles, TheWorkerRunsRetriesDeadLettersAndForwardsButCannotEnqueueElsewhereOrPause) {
  if (!supported()) return;
  Producer p({.connection = {.url = url("producer")}, .stream = queue});
  p.enqueue("ok", R"({})", {.unique_for = 1min, .unique_key = "u"});
  p.enqueue("ok", R"({})", {.delay = 300ms});
  p.enqueue("flaky", R"({})", {.max_retries = 1});
  p.enqueue("long", R"({})");
  // A tracked task: its record and events are the producer's, then the worker's to write.
  const std::string tracked = p.enqueue("ok", R"({})", {.retention = Retention{.done = 1min}});
  // Under a concurrency limit, and cancelled by the operator while it runs: the slot, its
  // renewal and release, and the cancel request are the worker's to read and write.
  const std::string to_cancel = p.enqueue("cancel_me", R"({})");
  // A flow whose children succeed and fail (ignored): the worker's ends update the parent, the
  // last one enqueues it.
  const FlowIds flow =
      p.enqueue_flow(chord({{.task_type = "ok", .payload = "{}"},
                            {.task_type = "flaky", .payload = "{}", .options = {.max_retries = 1}}},
                           {.task_type = "ok", .payload = "{}"}, ChildFailure::ignore));
  // A batch the worker's ends finish: the last one enqueues its (tracked) callback.
  const std::string batch = p.open_batch(
      {.on_complete =
           TaskSpec{.task_type = "ok", .payload = "{}", .options = {.retention = Retention{.done = 1min}}}});
  p.enqueue("ok", R"({})", {.batch = batch});
  p.close_batch(batch);
  std::atomic<int> done{0}, flaky{0}, long_done{0};
  std::atomic<bool> go{false}, cancel_started{false};
  std::string long_entry;
  std::mutex m;
  ConsumerOptions o{.connection = {.url = url("worker")}, .stream = queue};
  o.retry_backoff = {.base = 50ms, .cap = 50ms};
  o.forward_interval = 50ms;
  o.heartbeat_interval = 100ms;
  o.claim_min_idle = 1000ms;
  RunningConsumer w(o, [&](Consumer& c) {
    c.on("ok", [&](const Task&) { ++done; });
    c.on("flaky", [&](const Task&) {
      ++flaky;
      throw std::runtime_error("down");
    });
    c.on("cancel_me",
         [&](const Task& t) {
           cancel_started = true;
           std::mutex cm;
           std::condition_variable_any cv;
           std::unique_lock lock(cm);
           cv.wait_for(lock, t.stop_token(), 20s, [] { return false; });
         },
         {.concurrency = {.limit = 1}});
    c.on("long", [&](const Task& t) {
      {
        std::lock_guard lock(m);
        long_entry = t.entry_id();
      }
      EXPECT_TRUE(wait_until([&] { return go.load(); }));
      ++long_done;
    });
  });
  // A body deleted under its running handler: the record, its note, the note's renewal and
  // deletion are the worker's to write.
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(m);
    return !long_entry.empty();
  }));
  admin.cmd({"XDEL", queue, long_entry}).view().check();
  ASSERT_TRUE(wait_until([&] { return admin.integer({"EXISTS", queue + ":orphan:" + long_entry}) == 1; }));
  go = true;
  ASSERT_TRUE(wait_until([&] { return cancel_started.load(); }));
  std::this_thread::sleep_for(1500ms);  // longer than claim_min_idle: its slot lives by renewals
  EXPECT_EQ(admin.integer({"ZCARD", queue + ":running:cancel_me"}), 1) << "its slot was renewed";
  Inspector as_operator({.connection = {.url = url("operator")}});
  EXPECT_EQ(as_operator.cancel(queue, to_cancel), CancelOutcome::running);
  ASSERT_TRUE(wait_until([&] { return w.consumer().metrics().cancelled == 1; }));
  EXPECT_EQ(admin.integer({"ZCARD", queue + ":running:cancel_me"}), 0) << "its slot was given back";
  ASSERT_TRUE(wait_until([&] {
    return done.load() == 7 && long_done.load() == 1 && admin.integer({"XLEN", queue + ":dlq"}) == 2 &&
           admin.integer({"EXISTS", queue + ":orphan:" + long_entry}) == 0;
  }));
  w.stop();
  EXPECT_EQ(w.consumer().metrics().done, 8u);
  EXPECT_EQ(p.wait(tracked, 5s).state, TaskRecord::State::done);  // the producer reads the record
  EXPECT_EQ(p.wait(flow.task_id, 5s).state, TaskRecord::State::done);
  EXPECT_EQ(Inspector({.connection = {.url = url("operator")}}).batch(queue, batch)->state, "fired");
  EXPECT_EQ(flaky.load(), 4) << "the first attempt and its retry, of each";
  EXPECT_EQ(admin.integer({"XLEN", queue}), 0);
  EXPECT_EQ(admin.integer({"EXISTS", queue + ":unique:u"}), 0) << "the lock was released";

  Client as_worker(url("worker"));
  EXPECT_EQ(refusal_of(as_worker, {"SET", queue + ":paused", "1"}), "NOPERM") << "pausing is the operator's";
  EXPECT_EQ(refusal_of(as_worker, {"XADD", "another-queue", "*", "a", "b"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_worker, {"UNLINK", queue + ":dlq"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_worker, {"FLUSHDB"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_worker, {"CONFIG", "SET", "maxmemory", "1"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_worker, {"EXISTS", queue + ":paused"}), "accepted") << "it reads the pause flag";
}

// A worker given no consumer_name whose user may not run CLIENT LIST cannot tell whether the
// process that holds "<host>-1" still runs: it does not take that name (two live processes
// would share a pending list) but runs under its unique "<host>-<pid>-<hex>", with a warning.
TEST_F(AclRoles, AWorkerThatCannotTellWhichNamesAreFreeRunsUnderAUniqueName) {
  if (!supported()) return;
  std::vector<std::string> no_list = documented_roles(queue).at("worker");
  no_list.push_back("-client|list");
  ASSERT_FALSE(admin.cmd(no_list).view().is_error());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  ConsumerOptions o{.connection = {.url = url("worker")}, .stream = queue, .stop_on_signals = false};
  const auto noop = [](Consumer& c) { c.on("ok", [](const Task&) {}); };
  const auto named = [](RunningConsumer& c) {
    EXPECT_TRUE(wait_until([&] { return !c.consumer().name().empty() || c.finished(); }));
    return c.consumer().name();
  };
  o.connection.url = server.url();  // the administrator's worker takes <host>-1
  RunningConsumer first(o, noop);
  ASSERT_EQ(named(first), std::string(host) + "-1");
  o.connection.url = url("worker");
  LogCapture logs(LogLevel::warning);
  RunningConsumer second(o, noop);
  const std::string prefix = std::string(host) + "-" + std::to_string(getpid()) + "-";
  EXPECT_EQ(named(second).substr(0, prefix.size()), prefix) << second.consumer().name();
  EXPECT_EQ(logs.count(LogLevel::warning, "which of " + std::string(host) + "-<n> are free cannot be told"),
            1u);
  Producer p({.connection = {.url = url("producer")}, .stream = queue});
  for (int i = 0; i < 10; ++i) p.enqueue("ok", "{}");
  ASSERT_TRUE(
      wait_until([&] { return first.consumer().metrics().done + second.consumer().metrics().done == 10; }));
}

TEST_F(AclRoles, StatsReadsAndChangesNothing) {
  if (!supported()) return;
  Producer({.connection = {.url = url("producer")}, .stream = queue}).enqueue("t", R"({})");
  Producer({.connection = {.url = url("producer")}, .stream = queue}).enqueue("t", R"({})", {.tenant = "a"});
  StatsReader stats({.connection = {.url = url("stats")}, .stream = queue});
  EXPECT_EQ(stats.read().length, 1);
  EXPECT_EQ(stats.read().backlog, 1) << "the tasks waiting in the tenants' backlogs";
  Client as_stats(url("stats"));
  EXPECT_EQ(refusal_of(as_stats, {"XADD", queue, "*", "a", "b"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_stats, {"XDEL", queue, "1-1"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_stats, {"DEL", queue}), "NOPERM");
  Producer intruder({.connection = {.url = url("stats")}, .stream = queue});
  EXPECT_EQ(refusal([&] { intruder.enqueue("t", "{}"); }), "NOPERM");
  Inspector reader({.connection = {.url = url("stats")}});
  EXPECT_EQ(refusal([&] { reader.replay(queue); }), "NOPERM");
  EXPECT_EQ(refusal([&] { reader.purge_dead(queue); }), "NOPERM");
  EXPECT_EQ(admin.integer({"XLEN", queue}), 1);
}

TEST_F(AclRoles, TheOperatorReplaysPurgesPausesButCannotConsume) {
  if (!supported()) return;
  Producer p({.connection = {.url = url("producer")}, .stream = queue});
  const std::string later = p.enqueue("t", R"({})", {.delay = 1h});
  for (int i = 0; i < 3; ++i) {
    admin.cmd({"XADD", queue + ":dlq", "*", "task_id", "d" + std::to_string(i), "task_type", "t", "payload",
               "{}", "created_at", "2026-12-01T00:00:00.000000", "retry_count", "3", "reason",
               "max_retries"});
  }
  Inspector op({.connection = {.url = url("operator")}});
  const std::string waiting = p.enqueue("t", R"({})", {.retention = Retention{.done = 1h}, .tenant = "a"});
  EXPECT_EQ(op.tasks(queue, {.state = TaskState::backlog}).tasks.size(), 1u);
  EXPECT_EQ(op.cancel(queue, waiting), CancelOutcome::cancelled) << "a task waiting in its tenant's backlog";
  EXPECT_EQ(admin.integer({"EXISTS", queue + ":tenant:a", queue + ":tenants:ready"}), 0);
  EXPECT_EQ(op.stats(queue).dlq_length, 3);
  EXPECT_EQ(op.tasks(queue, {.state = TaskState::dead}).tasks.size(), 3u);
  EXPECT_EQ(op.replay(queue, {.filter = {.task_type = "t"}}).done, 3);
  EXPECT_TRUE(op.run_now(queue, later).has_value());
  EXPECT_EQ(op.cancel(queue, later), CancelOutcome::cancelled);
  // A tenant that has work: a task run now and a dead letter replayed join its backlog (RPUSH).
  p.enqueue("t", R"({})", {.tenant = "b"});
  const std::string later_b = p.enqueue("t", R"({})", {.delay = 1h, .tenant = "b"});
  EXPECT_EQ(op.run_now(queue, later_b), std::optional<std::string>("tenant:b"));
  const std::string dead_b(admin
                               .cmd({"XADD", queue + ":dlq", "*", "task_id", "db", "task_type", "t",
                                     "payload", "{}", "created_at", "2026-12-01T00:00:00.000000",
                                     "retry_count", "3", "reason", "max_retries", "streamq_tenant", "b"})
                               .view()
                               .str());
  EXPECT_EQ(op.replay(queue, {.filter = {.ids = {dead_b}}}).done, 1);
  EXPECT_EQ(admin.integer({"LLEN", queue + ":tenant:b"}), 3);
  const FlowIds flow =
      p.enqueue_flow(chord({{.task_type = "t", .payload = "{}"}}, {.task_type = "t", .payload = "{}"}));
  EXPECT_EQ(op.cancel(queue, flow.task_id), CancelOutcome::cancelled);
  EXPECT_EQ(op.record(queue, flow.children[0].task_id)->state, TaskRecord::State::cancelled);
  // A task whose worker is gone (its name held by a connection the server closed) says so.
  admin.cmd({"XGROUP", "CREATE", queue, "workers", "$", "MKSTREAM"});
  admin.cmd({"XGROUP", "SETID", queue, "workers", "$"}).view().check();
  const std::string held = p.enqueue("t", R"({})");
  admin.cmd({"XREADGROUP", "GROUP", "workers", "w1", "COUNT", "1", "STREAMS", queue, ">"});
  std::int64_t gone_id = 0;
  {
    Client gone(server.url());
    gone_id = gone.integer({"CLIENT", "ID"});
  }
  const std::string listed = "id=" + std::to_string(gone_id) + " ";
  ASSERT_TRUE(wait_until([&] {
    return admin.cmd({"CLIENT", "LIST"}).view().str().find(listed) == std::string::npos;
  }));
  const detail::ReplyView now = admin.cmd({"TIME"}).view();
  const std::int64_t now_ms =
      std::stoll(std::string(now[0].str())) * 1000 + std::stoll(std::string(now[1].str())) / 1000;
  admin.cmd({"SET", detail::live_key(queue, "workers", "w1"),
             std::to_string(gone_id) + " token " + std::to_string(now_ms), "PX", "60000"});
  const std::optional<TaskInfo> t = op.task(queue, held);
  ASSERT_TRUE(t && t->holder);
  EXPECT_TRUE(t->holder->gone) << t->to_json();
  op.pause(queue);
  EXPECT_TRUE(op.paused(queue));
  op.resume(queue);
  admin.cmd({"XADD", queue + ":dlq", "*", "task_id", "x", "task_type", "t", "payload", "{}"});
  EXPECT_EQ(op.purge_dead(queue), 1);
  bool found = false;
  for (const QueueInfo& q : op.queues()) found = found || q.name == queue;
  EXPECT_TRUE(found);

  Client as_operator(url("operator"));
  EXPECT_EQ(refusal_of(as_operator, {"XREADGROUP", "GROUP", "workers", "c", "STREAMS", queue, ">"}),
            "NOPERM");
  EXPECT_EQ(refusal_of(as_operator, {"XACK", queue, "workers", "1-1"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_operator, {"FLUSHDB"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_operator, {"CONFIG", "SET", "maxmemory", "1"}), "NOPERM");
  EXPECT_EQ(refusal_of(as_operator, {"XADD", "another-queue", "*", "a", "b"}), "NOPERM");
}

// streamq doctor --user: which roles each documented user can play on the queue (ACL DRYRUN, run by
// an administrator's connection).
TEST_F(AclRoles, DoctorTellsWhichRolesEachUserCanPlay) {
  if (!supported()) return;
  Inspector in({.connection = {.url = server.url()}});
  const std::map<std::string, std::set<std::string>> expected = {
      {"producer", {"producer"}},
      {"worker", {"worker"}},
      {"stats", {"stats"}},
      {"operator", {"stats", "operator"}},  // it reads everything a stats reader reads
  };
  for (const auto& [user, roles] : expected) {
    std::set<std::string> can;
    int checked = 0;
    for (const Finding& f : in.doctor(queue, "sq-" + user)) {
      if (f.topic != "acl") continue;
      ++checked;
      EXPECT_NE(f.message.find("user sq-" + user + " "), std::string::npos) << f.message;
      if (f.severity != Finding::Severity::ok) continue;
      for (const char* role : {"producer", "worker", "stats", "operator"}) {
        if (f.message.find(std::string("the ") + role + " role") != std::string::npos) can.insert(role);
      }
    }
    EXPECT_EQ(checked, 4) << user;
    EXPECT_EQ(can, roles) << user;
  }
}

}  // namespace
}  // namespace streamq::test
