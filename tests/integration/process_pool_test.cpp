// SPDX-License-Identifier: MIT
// The process executor's pool: children are reused and replaced, nothing outlives a worker
// killed with SIGKILL (its grandchildren, its Redis connections), a frozen worker's child stops
// within one lease, a lock another thread of the application holds is not copied held into the
// children, and many tasks through retiring children leave no zombie and no descriptor.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "chaos.hpp"
#include "control_fixture.hpp"
#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// The pid written in `file`, 0 until it is there.
int read_pid(const std::string& file) {
  std::ifstream in(file);
  int pid = 0;
  in >> pid;
  return pid;
}

/// A process's state letter (R, S, Z, ...) and parent, from /proc/<pid>/stat; 0 and 0 when it
/// is gone.
struct ProcStat {
  char state = 0;
  int ppid = 0;
};
ProcStat proc_stat(const std::string& pid) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string line;
  ProcStat out;
  if (!std::getline(stat, line)) return out;
  const auto close = line.rfind(')');  // the name may hold spaces and parentheses
  if (close == std::string::npos) return out;
  std::istringstream rest(line.substr(close + 1));
  rest >> out.state >> out.ppid;
  return out;
}
char state_of(int pid) { return proc_stat(std::to_string(pid)).state; }
int parent_of(int pid) { return proc_stat(std::to_string(pid)).ppid; }

/// The file a process runs (/proc/<pid>/exe), "" when it is gone.
std::string program_of(int pid) {
  std::error_code error;
  return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", error).string();
}

/// Gone, or a zombie waiting for its reaper.
bool gone(int pid) {
  const char s = state_of(pid);
  return s == 0 || s == 'Z';
}

/// The processes whose parent is `parent`, with their states.
std::vector<std::pair<int, char>> children_of(int parent) {
  std::vector<std::pair<int, char>> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const ProcStat st = proc_stat(e->d_name);
    if (st.ppid == parent) out.emplace_back(std::atoi(e->d_name), st.state);
  }
  closedir(d);
  return out;
}

std::size_t open_descriptors() {
  std::size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory's own
}

std::int64_t client_count(Client& c) {
  const std::string list(c.cmd({"CLIENT", "LIST"}).view().check().str());
  std::int64_t n = 0;
  for (const char ch : list) n += ch == '\n' ? 1 : 0;
  return n;
}

std::string temp_file(const std::string& what) {
  return ::testing::TempDir() + "streamq-" + what + "-" + std::to_string(getpid());
}

/// A "sleeper" task's processes: the child that runs its handler and the grandchild it started.
struct Sleeper {
  int child = 0;
  int grandchild = 0;
};

/// Waits until the "sleeper" task given `file` runs (the two write their pids to `file`.child and
/// `file`); zeros when it did not start within 20 s.
Sleeper sleeper_running(const std::string& file) {
  if (!wait_until([&] { return read_pid(file) > 0 && read_pid(file + ".child") > 0; }, 20s)) return {};
  return {read_pid(file + ".child"), read_pid(file)};
}

void remove_files(std::initializer_list<std::string> files) {
  for (const std::string& f : files) std::remove(f.c_str());
}

/// A private redis-server and a worker process (consumer w1, with `extra` arguments) that runs
/// a "sleeper" task given temp_file(`name`).
struct SleeperScene {
  SleeperScene(const std::string& name, const std::vector<std::string>& extra)
      : file(temp_file(name)), worker(arguments(extra)) {
    remove_files({file, file + ".child"});
    producer.enqueue("sleeper", nlohmann::json{{"file", file}}.dump(), {.max_retries = 0});
    running = sleeper_running(file);
  }
  ~SleeperScene() { remove_files({file, file + ".child"}); }
  SleeperScene(const SleeperScene&) = delete;
  SleeperScene& operator=(const SleeperScene&) = delete;

  RedisServer server;
  const std::string stream = unique_key();
  const std::string file;
  Producer producer{{.connection = {.url = server.url()}, .stream = stream}};
  WorkerProcess worker;
  Sleeper running;  // zeros when it did not start

 private:
  std::vector<std::string> arguments(const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {STREAMQ_TEST_WORKER, server.url(), stream, "w1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

TEST(ProcessPool, AKilledWorkersGrandchildAndConnectionsAreGoneWithinASecond) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string file = temp_file("sleeper");
  remove_files({file, file + ".child"});
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  producer.enqueue("sleeper", nlohmann::json{{"file", file}}.dump(), {.max_retries = 0});
  const std::int64_t with_producer = client_count(client);
  const std::vector<std::string> args = {STREAMQ_TEST_WORKER, server.url(), stream, "w1", "min_idle_ms=1000"};
  WorkerProcess worker(args);
  // (Not a structured binding: clang 14 cannot capture one in the lambdas below.)
  const Sleeper running = sleeper_running(file);
  const int child = running.child;
  const int grandchild = running.grandchild;
  ASSERT_GT(grandchild, 0) << "the handler's grandchild did not start";
  EXPECT_GT(client_count(client), with_producer) << "the worker's connections";
  worker.kill9();
  const auto killed = std::chrono::steady_clock::now();
  EXPECT_TRUE(wait_until([&] { return gone(grandchild) && gone(child); }, 1s))
      << "the child " << child << " (" << state_of(child) << ") or the grandchild " << grandchild << " ("
      << state_of(grandchild) << ") outlived the worker by a second";
  EXPECT_TRUE(wait_until([&] { return client_count(client) == with_producer; },
                         std::chrono::duration_cast<std::chrono::milliseconds>(
                             1s - (std::chrono::steady_clock::now() - killed))))
      << client_count(client) - with_producer << " connections of the killed worker are still open";
  // A worker started again under the name is not refused it: no live process holds it.
  WorkerProcess again(args);
  EXPECT_EQ(again.wait_exit(1500ms), -1) << "the restarted worker exited (refused its name?)";
  remove_files({file, file + ".child"});
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif

TEST(ProcessPool, AChildWhoseForkServerIsKilledKillsItsGroupAndANewForkServerTakesOver) {
  // The child's parent-death signal has a handler (it kills the child's group): ThreadSanitizer
  // runs a handler only when the thread leaves the libc call it is in, here system()'s wait for
  // the 40 s sleep. (The other stages run it.)
  if (kThreadSanitizer)
    GTEST_SKIP() << "ThreadSanitizer defers the parent-death handler until system() returns";
  SleeperScene scene("orphaned", {});
  const int child = scene.running.child;
  const int grandchild = scene.running.grandchild;
  ASSERT_GT(grandchild, 0) << "the handler's grandchild did not start";
  const int fork_server = parent_of(child);
  ASSERT_GT(fork_server, 1);
  ASSERT_NE(fork_server, scene.worker.pid()) << "the child is the fork server's, not the worker's";
  ASSERT_EQ(parent_of(fork_server), scene.worker.pid());
  kill(fork_server, SIGKILL);
  EXPECT_TRUE(wait_until([&] { return gone(grandchild) && gone(child); }, 1s))
      << "the child " << child << " or its grandchild " << grandchild << " outlived their fork server";
  // The sleeper's attempt failed as a crash of its child fails it: counted (max_retries 0, so it
  // is dead-lettered as retries exhausted), not handed back, not left running.
  Client client(scene.server.url());
  const std::string dlq = scene.stream + ":dlq";
  ASSERT_TRUE(wait_until(
      [&] {
        return client.integer({"XLEN", dlq}) == 1;
      },
      20s))
      << "the sleeper's attempt did not fail";
  const auto dead = client.xrange(dlq);
  EXPECT_EQ(Client::get(dead[0].second, "task_type"), "sleeper");
  EXPECT_EQ(Client::get(dead[0].second, "reason"), "retries_exhausted");
  // The next process task gets a new fork server (forked from the running worker).
  const std::string next = temp_file("after");
  std::remove(next.c_str());
  scene.producer.enqueue("spinner", nlohmann::json{{"file", next}}.dump(), {.max_retries = 0});
  ASSERT_TRUE(wait_until([&] { return read_pid(next) > 0; }, 20s))
      << "no process task ran after the fork server died";
  EXPECT_NE(parent_of(read_pid(next)), fork_server);
  std::remove(next.c_str());
}

TEST(ProcessPool, AKilledWorkerWhoseApplicationForkedACopyOfItStillTakesItsChildrenAlong) {
  // The application forks a helper without exec after run(): the helper holds a copy of the
  // worker's end of the fork server's socket, which then never closes when the worker dies.
  const std::string helper_file = temp_file("app-fork");
  std::remove(helper_file.c_str());
  SleeperScene scene("copied", {"app_fork=" + helper_file});
  const int child = scene.running.child;
  const int grandchild = scene.running.grandchild;
  ASSERT_GT(grandchild, 0) << "the handler's grandchild did not start";
  ASSERT_TRUE(wait_until([&] { return read_pid(helper_file) > 0; }, 20s)) << "the application did not fork";
  const int helper = read_pid(helper_file);
  scene.worker.kill9();
  EXPECT_TRUE(wait_until([&] { return gone(grandchild) && gone(child); }, 1s))
      << "the child " << child << " or its grandchild " << grandchild
      << " outlived the worker by a second (a fork of the application holds the worker's socket)";
  kill(helper, SIGKILL);  // the application's own process: the test ends it
  std::remove(helper_file.c_str());
}

TEST(ProcessPool, AFrozenWorkersChildStopsWithinOneLease) {
  RedisServer server;
  const std::string stream = unique_key();
  const std::string file = temp_file("spinner");
  std::remove(file.c_str());
  Producer producer({.connection = {.url = server.url()}, .stream = stream});
  producer.enqueue("spinner", nlohmann::json{{"file", file}}.dump());
  constexpr auto lease = 1500ms;
  WorkerProcess worker(
      {STREAMQ_TEST_WORKER, server.url(), stream, "w1", "min_idle_ms=" + std::to_string(lease.count())});
  ASSERT_TRUE(wait_until([&] { return read_pid(file) > 0; }, 20s)) << "the handler did not start";
  const int child = read_pid(file);
  worker.signal(SIGSTOP);
  const auto frozen = std::chrono::steady_clock::now();
  const bool stopped = wait_until([&] { return gone(child); }, 2 * lease);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - frozen);
  worker.signal(SIGCONT);
  ASSERT_TRUE(stopped) << "the frozen worker's child still ran " << took.count() << " ms after the freeze";
  EXPECT_LE(took, lease) << "the child stopped " << took.count() << " ms after the freeze";
  std::printf("[ figure ] a frozen worker's child stopped %lld ms after the freeze (lease %lld ms)\n",
              static_cast<long long>(took.count()), static_cast<long long>(lease.count()));
  // Thawed, the worker puts the task back uncounted (lease_lost), and it runs again in a new child.
  ASSERT_TRUE(wait_until([&] { return read_pid(file) > 0 && read_pid(file) != child; }, 20s))
      << "the task did not run again after the thaw";
  Client client(server.url());
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  const std::string retries = Client::get(entries[0].second, "retry_count");
  EXPECT_TRUE(retries.empty() || retries == "0") << "the killed attempt was counted: retry_count " << retries;
  EXPECT_EQ(client.integer({"XLEN", stream + ":dlq"}), 0);
  std::remove(file.c_str());
}

TEST(ProcessPool, AForkServerForkedWhileTheApplicationRunsThreadsIsWarnedOf) {
  // Once per process, so each case is a worker process of its own: a thread of the
  // application started before run() is warned of; a worker with no other thread is not.
  RedisServer server;
  const std::string file = temp_file("warned");
  for (const bool app_thread : {true, false}) {
    const std::string stream = unique_key(app_thread ? "threads" : "alone");
    const std::string log = file + (app_thread ? ".threads" : ".alone");
    std::remove(log.c_str());
    std::remove(file.c_str());
    Producer producer({.connection = {.url = server.url()}, .stream = stream});
    producer.enqueue("spinner", nlohmann::json{{"file", file}}.dump(), {.max_retries = 0});
    WorkerProcess worker({STREAMQ_TEST_WORKER, server.url(), stream, app_thread ? "threads" : "alone",
                          "app_thread=" + std::string(app_thread ? "1" : "0")},
                         log);
    ASSERT_TRUE(wait_until([&] { return read_pid(file) > 0; }, 20s)) << "the handler did not start";
    worker.kill9();
    const std::string said = slurp(log);
    // "ran N threads": the worker's main thread and the application's, and under a sanitizer
    // that starts a thread of its own with the first pthread_create (TSan), that one too.
    const std::string warning = "the fork server was forked while this process ran ";
    const std::size_t at = said.find(warning);
    EXPECT_EQ(at != std::string::npos, app_thread) << said;
    if (at != std::string::npos) {
      EXPECT_GE(std::atoi(said.c_str() + at + warning.size()), 2) << said;
    }
    std::remove(log.c_str());
  }
  std::remove(file.c_str());
}

/// Appends this process's pid to `file` (one short write: appends do not interleave).
void append_pid(const std::string& file) {
  if (FILE* f = std::fopen(file.c_str(), "a")) {
    std::fprintf(f, "%d\n", static_cast<int>(getpid()));
    std::fclose(f);
  }
}

std::vector<int> pids_in(const std::string& file) {
  std::vector<int> out;
  std::ifstream in(file);
  for (int pid = 0; in >> pid;) out.push_back(pid);
  return out;
}

/// `o` with one handler thread, so one child at a time.
ConsumerOptions one_child(ConsumerOptions o) {
  o.concurrency = 1;
  return o;
}

/// Registers "pid": a process handler that appends its child's pid to `file`.
void on_pid(Consumer& c, const std::string& file, const ProcessLimits& limits = {}) {
  c.on("pid", [file](const Task&) { append_pid(file); },
       {.executor = HandlerExecutor::process, .limits = limits});
}

// A worker stopped while a process handler runs past shutdown_grace: the child is not signalled;
// run() returns after the grace with the entry still pending, and since its leases are no longer
// renewed, the child's dead man's switch kills it before its lease ends, so it no longer runs
// when another worker reclaims the task, uncounted (here it has no retry left).
TEST_F(ControlTest, AStoppedWorkersChildPastTheGraceIsKilledByItsSwitchBeforeItsLeaseEnds) {
  const std::string file = temp_file("grace");
  std::remove(file.c_str());
  Producer p = producer();
  ConsumerOptions o = one_child(fast());
  o.claim_min_idle = 1500ms;
  o.shutdown_grace = 200ms;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("spin",
         [file](const Task&) {
           append_pid(file);
           for (;;) pause();
         },
         {.executor = HandlerExecutor::process});
  });
  p.enqueue("spin", "{}", {.max_retries = 0});
  ASSERT_TRUE(wait_until([&] { return !pids_in(file).empty(); }, 20s)) << "the handler did not start";
  const int child = pids_in(file).front();
  worker.stop();  // returns once run() did: after the grace
  const auto returned = std::chrono::steady_clock::now();
  EXPECT_FALSE(gone(child)) << "the child was signalled at the stop";
  // Its lease was renewed during the grace at most, so it ends at most claim_min_idle after run()
  // returned.
  const bool killed = wait_until([&] { return gone(child); }, 2 * o.claim_min_idle);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - returned);
  ASSERT_TRUE(killed) << "the child ran on " << took.count() << " ms after its worker stopped";
  EXPECT_LT(took, o.claim_min_idle) << "the child ran past its lease";
  std::printf(
      "[ figure ] a stopped worker's child past its grace was killed %lld ms after run() returned (lease "
      "%lld ms)\n",
      static_cast<long long>(took.count()), static_cast<long long>(o.claim_min_idle.count()));
  EXPECT_EQ(pending(), 1) << "the entry stays pending, for a reclaim";
  EXPECT_EQ(xlen(dlq), 0);
  // Another worker takes it over once the lease ended and runs it, the attempt not counted.
  std::atomic<int> reran{0};
  ConsumerOptions o2 = fast();
  o2.claim_min_idle = 1500ms;
  o2.reclaim_interval = 50ms;
  o2.consumer_name = "second";
  RunningConsumer again(o2, [&](Consumer& c) { c.on("spin", [&](const Task&) { ++reran; }); });
  ASSERT_TRUE(wait_until([&] { return reran.load() == 1 && pending() == 0 && xlen(stream) == 0; }, 20s));
  again.stop();
  EXPECT_EQ(xlen(dlq), 0) << "max_retries 0: a counted attempt would have dead-lettered it";
  std::remove(file.c_str());
}

TEST_F(ControlTest, AChildIsReusedAndOneKilledAtItsTimeoutIsReplaced) {
  const std::string file = temp_file("pids");
  std::remove(file.c_str());
  Producer p = producer();
  RunningConsumer worker(one_child(fast()), [&](Consumer& c) {
    on_pid(c, file);
    c.on("spin",
         [](const Task&) {
           for (;;) pause();
         },
         {.timeout = 300ms, .executor = HandlerExecutor::process});
  });
  const auto done = [&](std::uint64_t n) {
    return wait_until([&] { return worker.consumer().metrics().done == n; }, 20s);
  };
  p.enqueue("pid", "{}");
  ASSERT_TRUE(done(1));
  p.enqueue("pid", "{}");
  ASSERT_TRUE(done(2));
  p.enqueue("spin", "{}", {.max_retries = 0});
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 20s));
  p.enqueue("pid", "{}");
  ASSERT_TRUE(done(3)) << "the task after the killed one did not run";
  worker.stop();
  const std::vector<int> pids = pids_in(file);
  ASSERT_EQ(pids.size(), 3U);
  EXPECT_EQ(pids[0], pids[1]) << "the second task ran in another child: the first was not reused";
  EXPECT_NE(pids[2], pids[0]) << "the killed child ran the next task";
  EXPECT_EQ(Client::get(dead_letter(), "reason"), "timeout");
  std::remove(file.c_str());
}

TEST_F(ControlTest, AHandlerTakesAMutexAnotherThreadTookAfterRun) {
  // Another thread of the application takes a mutex after run() started and holds it while the
  // task runs: the child was forked from a copy made before, in which the mutex is free.
  Producer p = producer();
  std::mutex shared_mutex;
  std::atomic<bool> started{false};
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.use([&](const Task&, const Next& next) {
      started = true;
      next();
    });
    c.on("locks", [&](const Task&) { std::lock_guard lock(shared_mutex); },
         {.executor = HandlerExecutor::process});
  });
  ASSERT_TRUE(wait_until([&] { return !worker.consumer().name().empty(); }, 10s));
  std::atomic<bool> held{false};
  std::thread app([&] {
    std::lock_guard lock(shared_mutex);
    held = true;
    wait_until([&] { return started.load(); }, 10s);
    std::this_thread::sleep_for(1s);
  });
  ASSERT_TRUE(wait_until([&] { return held.load(); }, 5s));
  p.enqueue("locks", "{}", {.max_retries = 0});
  EXPECT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 10s))
      << "the handler waits for a lock held at the fork";
  app.join();
  worker.stop();
}

TEST_F(ControlTest, AForkServerStartedEarlyHasNoLockTheApplicationTookBeforeRun) {
  Producer p = producer();
  std::mutex shared_mutex;
  std::atomic<bool> started{false}, held{false}, release{false};
  std::thread app;
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.use([&](const Task&, const Next& next) {
      started = true;
      next();
    });
    c.on("locks", [&](const Task&) { std::lock_guard lock(shared_mutex); },
         {.executor = HandlerExecutor::process});
    c.start_fork_server();  // before the application's thread takes the mutex
    EXPECT_THROW(c.start_fork_server(), ConfigError);
    EXPECT_THROW(c.on("late", [](const Task&) {}, {.executor = HandlerExecutor::process}), ConfigError);
    app = std::thread([&] {
      std::lock_guard lock(shared_mutex);  // held from before run() until the task ran
      held = true;
      wait_until([&] { return release.load(); }, 20s);
    });
    wait_until([&] { return held.load(); }, 5s);
  });
  p.enqueue("locks", "{}", {.max_retries = 0});
  EXPECT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 10s))
      << "the handler waits for a lock held at the fork";
  EXPECT_TRUE(started.load());
  release = true;
  app.join();
  worker.stop();
}

TEST_F(ControlTest, RetiringChildrenLeaveNoZombieAndNoDescriptor) {
  const std::string file = temp_file("retiring");
  std::remove(file.c_str());
  const std::size_t fds_before = open_descriptors();
  {
    Producer p = producer();
    std::vector<TaskSpec> batch(1000, TaskSpec{"pid", "{}"});
    p.enqueue_batch(batch);
    RunningConsumer worker(one_child(fast()),
                           [&](Consumer& c) { on_pid(c, file, {.tasks_per_child = 100}); });
    ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1000; }, 60s));
    // The fork server is this process's child, a copy of this program (the fixture's server,
    // redis-server or valkey-server, is another); none of its children is a zombie.
    int servers = 0;
    for (const auto& [pid, state] : children_of(getpid())) {
      EXPECT_NE(state, 'Z') << "zombie " << pid;
      if (program_of(pid) != program_of(getpid())) continue;
      ++servers;
      for (const auto& [grandchild, s] : children_of(pid)) EXPECT_NE(s, 'Z') << "zombie child " << grandchild;
      EXPECT_LE(children_of(pid).size(), 1U);
    }
    EXPECT_EQ(servers, 1) << "one fork server";
    worker.stop();
  }
  const std::vector<int> pids = pids_in(file);
  EXPECT_EQ(pids.size(), 1000U);
  EXPECT_EQ(std::set<int>(pids.begin(), pids.end()).size(), 10U) << "100 tasks per child";
  EXPECT_EQ(open_descriptors(), fds_before) << "descriptors leaked";
  for (const auto& [pid, state] : children_of(getpid())) EXPECT_NE(state, 'Z') << "zombie " << pid;
  std::remove(file.c_str());
}

TEST_F(ControlTest, AChildThatDiesWhileAForkOfItsHoldsItsSocketFailsAtOnceAndTheForkGoes) {
  // The handler forks a helper without exec (the helper has a copy of the child's socket), then
  // the child crashes: the worker sees the end at once and the helper goes with its child.
  const std::string file = temp_file("helper");
  std::remove(file.c_str());
  Producer p = producer();
  RunningConsumer worker(fast(), [&](Consumer& c) {
    c.on("forks",
         [&](const Task&) {
           if (fork() == 0) {
             append_pid(file);
             for (;;) pause();
           }
           wait_until([&] { return !pids_in(file).empty(); }, 5s);
           std::abort();
         },
         {.executor = HandlerExecutor::process});
  });
  p.enqueue("forks", "{}", {.max_retries = 0});
  ASSERT_TRUE(wait_until([&] { return !pids_in(file).empty(); }, 20s)) << "the handler did not fork";
  const int helper = pids_in(file).front();
  EXPECT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 5s)) << "the crash of the child was not seen";
  EXPECT_TRUE(wait_until([&] { return gone(helper); }, 2s)) << "the handler's helper outlived its child";
  worker.stop();
  if (!gone(helper)) kill(helper, SIGKILL);
  std::remove(file.c_str());
}

TEST_F(ControlTest, TheForkServerIgnoresTheSignalsOfAStopMeantForTheWorker) {
  // A signal meant for the worker that reaches the fork server (a service manager's stop sent to
  // every process of the service) ends neither it nor its children: the worker's stop does.
  const std::string file = temp_file("stopped");
  std::remove(file.c_str());
  Producer p = producer();
  RunningConsumer worker(one_child(fast()), [&](Consumer& c) { on_pid(c, file); });
  p.enqueue("pid", "{}");
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 20s));
  const int child = pids_in(file).front();
  const int fork_server = parent_of(child);
  ASSERT_GT(fork_server, 1);
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) kill(fork_server, sig);
  EXPECT_FALSE(wait_until([&] { return gone(fork_server); }, 200ms))
      << "the fork server died of a signal meant for the worker";
  p.enqueue("pid", "{}");
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 2; }, 20s));
  const std::vector<int> pids = pids_in(file);
  ASSERT_EQ(pids.size(), 2U);
  EXPECT_EQ(pids[1], pids[0]) << "the second task ran in a new child: the first was lost with the signal";
  worker.stop();
  std::remove(file.c_str());
}

TEST_F(ControlTest, TheForkServersOptionsAreChecked) {
  Consumer c(options());
  EXPECT_THROW(
      c.on("a", [](const Task&) {}, {.executor = HandlerExecutor::process, .limits = {.tasks_per_child = 0}}),
      ConfigError);
  EXPECT_THROW(c.on("b", [](const Task&) {}, {.limits = {.tasks_per_child = 10}}), ConfigError);
  EXPECT_THROW(c.on("c", [](const Task&) {}, {.limits = {.memory_per_child = 1 << 20}}), ConfigError);
  EXPECT_THROW(c.start_fork_server(), ConfigError) << "no process handler";
}

}  // namespace
}  // namespace streamq::test
