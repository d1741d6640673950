// SPDX-License-Identifier: MIT
// streamq-bench: one scenario per run, one result line (key=value) on stdout.
//   streamq-bench <scenario> --url URL [--stream S] [--count N] [--batch B] [--rate R]
//                 [--concurrency C] [--prefetch F]   (consumer scenarios; default: the Consumer's)
//                 [--partitions P]   (the queue's partitions: producers and consumers alike)
//                 [--tracked 1]      (tasks enqueued with a Retention: record and events)
//                 [--executor process]   (drain: each handler call in a child process of the
//                                         pool; prints the warm rate, the cold start and the
//                                         process tree's peak memory)
//                 [--tasks-per-child K]  (with --executor process: ProcessLimits::tasks_per_child)
// Scenarios:
//   enqueue        N single enqueues on one connection
//   enqueue-batch  N tasks through enqueue_batch in batches of B (default 1000)
//   enqueue-shared N single enqueues from T threads (--threads, default 8) on one shared
//                  Producer (pipelined together); prints the connections it used
//   enqueue-per-thread  the same T threads, each with a Producer of its own (T connections)
//   enqueue-async  N enqueue_async calls from one thread, at most 4096 unanswered at a time
//   enqueue-raw    the client's reference for enqueue: a bare hiredis loop, one XADD of a
//                  streamq-sized task per round trip
//   preload        N tasks enqueued in batches (setup for drain; prints nothing measured);
//                  --tenants T: task i names tenant t<i % T> (EnqueueOptions::tenant)
//   drain          a Consumer with default options and a no-op handler runs the N preloaded
//                  tasks; time from run() to the last ack
//   drain-levels   as drain, with the N tasks spread over the three priority levels (a third
//                  each, enqueued outside the timed part), served in the default strict order
//   drain-raw      the reference for drain: a raw hiredis loop on one connection doing the same
//                  Redis work per task (XREADGROUP COUNT 64, then XACK + XDEL of those ids
//                  pipelined with the next read), no parsing, no handler
//   latency        a producer at R tasks/s (default 5000) for N tasks and a consumer in the
//                  same process; time from enqueue returning to the handler starting
//   retry          N tasks that fail once and then succeed: throughput through the retry script
//                  (no backoff: the copy goes straight back to the stream)
//   retry-backoff  the same with a backoff of up to 20 ms: each copy waits in the delayed set
//                  and is forwarded from there
//   forward        N delayed tasks all due at one moment: tasks/s the forwarder moves from the
//                  delayed set to the stream, while the consumer's handlers drain them
//   wait           N enqueue_and_wait round trips, one after another, with a consumer in the
//                  same process whose handler returns a result: latency of each round trip
//   progress       one tracked task whose handler calls Task::set_progress N times: the
//                  latency of each call, and the writes they cost (reports are coalesced)
//   fairness       tenant A's N tasks queued, two consumers of concurrency 8 with 1 ms handlers,
//                  0.5 s later 9 other tenants enqueue 100 each: `between` counts the starts
//                  from those 900 enqueued to the last of them started (--weight W: the 9
//                  others' weight; --tenants 0: the same tasks without tenants, FIFO)
//   tenants-memory N tenants with a task each: the server's bytes per tenant with work, after
//                  the drain (tasks/s) and with settings of its own
// Every scenario prints the process's peak RSS (getrusage ru_maxrss).
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>

#include <streamq/streamq.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A payload about the size of the seed's send_email task.
const std::string kPayload = R"({"to":"user@example.com","template":"order_confirmation","order_id":12345})";

struct Args {
  std::string scenario;
  std::string url = "redis://127.0.0.1:6379";
  std::string stream = "bench";
  long count = 100000;
  long batch = 1000;
  long rate = 5000;
  int concurrency = 0;  // 0 = the Consumer's default (at least one thread per partition)
  int prefetch = 0;     // 0 = the Consumer's default
  int partitions = 1;
  bool tracked = false;
  bool process = false;
  int tasks_per_child = 1000;
  int threads = 8;
  bool trim = false;  // --overflow trim_oldest: a plain XADD, no script (the default is reject)
  bool away = false;  // --away 1 (chord): the header's tasks in another queue, run by its own consumer
  long tenants = 0;   // --tenants N (preload): task i names tenant t<i % N> (0: no tenant)
  double weight = 1;  // --weight W (fairness): the other tenants' weight (tenant A keeps 1)
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw std::invalid_argument("missing scenario");
  a.scenario = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--url")
      a.url = v;
    else if (k == "--stream")
      a.stream = v;
    else if (k == "--count")
      a.count = std::stol(v);
    else if (k == "--batch")
      a.batch = std::stol(v);
    else if (k == "--rate")
      a.rate = std::stol(v);
    else if (k == "--concurrency")
      a.concurrency = std::stoi(v);
    else if (k == "--prefetch")
      a.prefetch = std::stoi(v);
    else if (k == "--partitions")
      a.partitions = std::stoi(v);
    else if (k == "--tracked")
      a.tracked = v == "1";
    else if (k == "--executor")
      a.process = v == "process";
    else if (k == "--tasks-per-child")
      a.tasks_per_child = std::stoi(v);
    else if (k == "--threads")
      a.threads = std::max(1, std::stoi(v));
    else if (k == "--overflow")
      a.trim = v == "trim_oldest";
    else if (k == "--away")
      a.away = v == "1";
    else if (k == "--tenants")
      a.tenants = std::stol(v);
    else if (k == "--weight")
      a.weight = std::stod(v);
    else
      throw std::invalid_argument("unknown flag " + k);
  }
  return a;
}

long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The CPU time (user and system) this process has used so far, in microseconds.
double cpu_us() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto us = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec);
  };
  return us(u.ru_utime) + us(u.ru_stime);
}

void report(const Args& a, double seconds, const std::string& extra = "") {
  // cpu_us_per_task: the whole process's CPU (user and system, set-up included) per task: the
  // client's own work, the kernel's share of its I/O and wake-ups included.
  std::printf("scenario=%s tasks=%ld seconds=%.3f tasks_per_s=%.0f peak_rss_mb=%.1f cpu_us_per_task=%.2f%s\n",
              a.scenario.c_str(), a.count, seconds, static_cast<double>(a.count) / seconds,
              peak_rss_kb() / 1024.0, cpu_us() / static_cast<double>(a.count), extra.c_str());
}

streamq::ProducerOptions producer_options(const Args& a) {
  // max_len above the run's size: the default reject policy stays on, but never refuses here.
  streamq::ProducerOptions o{.connection = {.url = a.url},
                             .stream = a.stream,
                             .max_len = std::max(10000L, 2 * a.count),
                             .overflow = a.trim ? streamq::Overflow::trim_oldest : streamq::Overflow::reject,
                             .partitions = a.partitions};
  // Tracked: a record kept a minute once done (what a caller that waits needs), and events.
  if (a.tracked) o.retention = streamq::Retention{.done = std::chrono::minutes(1)};
  return o;
}

void enqueue_batches(streamq::Producer& p, long count, long batch,
                     const streamq::EnqueueOptions& options = {}) {
  std::vector<streamq::TaskSpec> tasks;
  for (long done = 0; done < count; done += batch) {
    tasks.assign(static_cast<std::size_t>(std::min(batch, count - done)), {"send_email", kPayload, options});
    p.enqueue_batch(tasks);
  }
}

/// `count` tasks over `tenants` tenants (task i names tenant t<i % tenants>), in batches.
void enqueue_tenants(streamq::Producer& p, long count, long batch, long tenants) {
  std::vector<streamq::TaskSpec> tasks;
  for (long done = 0; done < count; done += batch) {
    tasks.clear();
    for (long i = done; i < std::min(count, done + batch); ++i) {
      tasks.push_back({"send_email", kPayload, {.tenant = "t" + std::to_string(i % tenants)}});
    }
    p.enqueue_batch(tasks);
  }
}

/// Runs `consumer` until `finished` turns true (set with finish()), from another thread that
/// stops it.
void run_until(streamq::Consumer& consumer, std::atomic<bool>& finished) {
  std::thread watcher([&] {
    finished.wait(false);
    consumer.stop();
  });
  consumer.run();
  watcher.join();
}

void finish(std::atomic<bool>& finished) {
  finished.store(true);
  finished.notify_all();
}

streamq::ConsumerOptions consumer_options(const Args& a) {
  streamq::ConsumerOptions o{.connection = {.url = a.url}, .stream = a.stream, .group = "bench"};
  o.partitions = a.partitions;
  o.concurrency = a.concurrency > 0 ? a.concurrency : std::max(o.concurrency, a.partitions);
  if (a.prefetch > 0) o.prefetch = a.prefetch;
  o.prefetch = std::max(o.prefetch, o.concurrency);
  return o;
}

/// The raw reference for drain: what Redis must do per task, with the least client work.
/// A bare hiredis connection to a.url: the references' client (no parsing beyond hiredis's).
class RawClient {
 public:
  explicit RawClient(const Args& a) {
    const std::string host_port = a.url.substr(a.url.find("://") + 3);
    const std::string host = host_port.substr(0, host_port.rfind(':'));
    c_ = redisConnect(host.c_str(), std::stoi(host_port.substr(host_port.rfind(':') + 1)));
    if (c_ == nullptr || c_->err != 0) throw std::runtime_error(a.scenario + ": cannot connect to " + a.url);
  }
  ~RawClient() { redisFree(c_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  void command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& s : args) {
      argv.push_back(s.data());
      lens.push_back(s.size());
    }
    redisAppendCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  redisReply* reply() {
    void* r = nullptr;
    if (redisGetReply(c_, &r) != REDIS_OK || r == nullptr) throw std::runtime_error("raw client: I/O error");
    return static_cast<redisReply*>(r);
  }

 private:
  redisContext* c_ = nullptr;
};

void drain_raw(const Args& a) {
  RawClient c(a);
  c.command({"XGROUP", "CREATE", a.stream, "bench", "0", "MKSTREAM"});
  freeReplyObject(c.reply());
  const std::vector<std::string> read = {"XREADGROUP", "GROUP", "bench",   "raw",    "COUNT", "64",
                                         "BLOCK",      "1000",  "STREAMS", a.stream, ">"};
  const auto t = Clock::now();
  c.command(read);
  long done = 0;
  while (done < a.count) {
    redisReply* r = c.reply();
    std::vector<std::string> ack = {"XACK", a.stream, "bench"}, del = {"XDEL", a.stream};
    if (r->type == REDIS_REPLY_ARRAY) {
      const redisReply* entries = r->element[0]->element[1];
      for (std::size_t i = 0; i < entries->elements; ++i) {
        const redisReply* id = entries->element[i]->element[0];
        ack.emplace_back(id->str, id->len);
        del.emplace_back(id->str, id->len);
      }
      done += static_cast<long>(entries->elements);
    }
    freeReplyObject(r);
    const bool acks = ack.size() > 3;
    if (acks) {
      c.command(ack);
      c.command(del);
    }
    if (done < a.count) c.command(read);
    if (acks) {
      freeReplyObject(c.reply());
      freeReplyObject(c.reply());
    }
  }
  report(a, seconds_since(t));
}

/// enqueue-raw: what the best blocking hiredis client does for `enqueue`: one XADD of a
/// streamq-sized task per round trip (the command built once, as redis-benchmark's is).
void enqueue_raw(const Args& a) {
  RawClient c(a);
  const std::vector<std::string> xadd = {"XADD",        a.stream,
                                         "MAXLEN",      "~",
                                         "10000",       "*",
                                         "task_id",     "3f2c1a9e-7b4d-4c8e-9f10-2a3b4c5d6e7f",
                                         "task_type",   "send_email",
                                         "payload",     kPayload,
                                         "created_at",  "2026-11-29T18:00:00.123456",
                                         "max_retries", "3",
                                         "retry_count", "0"};
  const auto t = Clock::now();
  for (long i = 0; i < a.count; ++i) {
    c.command(xadd);
    freeReplyObject(c.reply());
  }
  report(a, seconds_since(t));
}

std::string percentiles(std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<std::size_t>(q * static_cast<double>(us.size() - 1))]; };
  char buf[160];
  std::snprintf(buf, sizeof buf, " p50_us=%.0f p90_us=%.0f p99_us=%.0f max_us=%.0f", at(0.5), at(0.9),
                at(0.99), us.back());
  return buf;
}

/// The processes whose parent is `parent` (/proc/<pid>/stat).
std::vector<int> children_of(int parent) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::atoi(e->d_name));
  }
  closedir(d);
  return out;
}

/// A field of /proc/<pid>/smaps_rollup ("Rss:", "Pss:"), kB.
long smaps_kb(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string key;
  long kb = 0;
  while (in >> key) {
    if (key == field) {
      in >> kb;
      return kb;
    }
    std::getline(in, key);
  }
  return 0;
}

/// Samples the memory of this process and its descendants (the fork server and its children)
/// every 200 ms: the peak of the sums of their resident sets and of their proportional sets
/// (PSS: a page shared by n processes counts 1/n in each), kB.
class TreeMemory {
 public:
  TreeMemory()
      : thread_([this](const std::stop_token& stop) {
          while (!stop.stop_requested()) {
            sample();
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
          }
        }) {}
  std::string report() {
    thread_.request_stop();
    thread_.join();
    char buf[96];
    std::snprintf(buf, sizeof buf, " tree_rss_mb=%.1f tree_pss_mb=%.1f", static_cast<double>(rss_) / 1024.0,
                  static_cast<double>(pss_) / 1024.0);
    return buf;
  }

 private:
  void sample() {
    long rss = 0, pss = 0;
    std::vector<int> todo{static_cast<int>(getpid())};
    while (!todo.empty()) {
      const int pid = todo.back();
      todo.pop_back();
      rss += smaps_kb(pid, "Rss:");
      pss += smaps_kb(pid, "Pss:");
      for (const int c : children_of(pid)) todo.push_back(c);
    }
    rss_ = std::max(rss_, rss);
    pss_ = std::max(pss_, pss);
  }
  long rss_ = 0, pss_ = 0;
  std::jthread thread_;
};

/// drain and drain-levels: a Consumer with a no-op handler runs the a.count queued tasks;
/// reports the time from run() to the last ack (run() returns after the final acks are
/// flushed). With the process executor: the rate from the first task's end on (the pool warm),
/// the cold start (run() to the first task's end: the fork server's fork and a child's), and the
/// process tree's peak memory.
void time_drain(const Args& a) {
  std::atomic<long> done{0};
  std::atomic<bool> finished{false};
  streamq::Consumer c(consumer_options(a));
  Clock::time_point first_done{};
  if (a.process) {
    // Each task in a child process: counted around it, in the worker (a middleware).
    c.use([&](const streamq::Task&, const streamq::Next& next) {
      next();
      const long n = ++done;
      if (n == 1) first_done = Clock::now();
      if (n == a.count) finish(finished);
    });
    c.on("send_email", [](const streamq::Task&) {},
         {.executor = streamq::HandlerExecutor::process, .limits = {.tasks_per_child = a.tasks_per_child}});
  } else {
    c.on("send_email", [&](const streamq::Task&) {
      if (++done == a.count) finish(finished);
    });
  }
  std::optional<TreeMemory> memory;
  if (a.process) memory.emplace();
  const auto t = Clock::now();
  run_until(c, finished);
  const double seconds = seconds_since(t);
  if (!a.process) {
    report(a, seconds);
    return;
  }
  const double cold = std::chrono::duration<double>(first_done - t).count();
  Args warm = a;
  warm.count = a.count - 1;
  report(warm, seconds - cold,
         " cold_start_ms=" + std::to_string(static_cast<long>(cold * 1000.0 + 0.5)) +
             " tasks_per_child=" + std::to_string(a.tasks_per_child) + memory->report());
}

/// How many connections named `name` the server at `url` has (CLIENT LIST).
int connections_named(const std::string& url, const std::string& name) {
  const auto colon = url.rfind(':');
  redisContext* c = redisConnect("127.0.0.1", std::stoi(url.substr(colon + 1)));
  if (c == nullptr || c->err) throw std::runtime_error("connections_named: cannot connect");
  auto* r = static_cast<redisReply*>(redisCommand(c, "CLIENT LIST"));
  int n = 0;
  if (r != nullptr && r->type == REDIS_REPLY_STRING) {
    std::istringstream lines(std::string(r->str, r->len));
    for (std::string line; std::getline(lines, line);)
      n += line.find(" name=" + name + " ") != std::string::npos;
  }
  freeReplyObject(r);
  redisFree(c);
  return n;
}

/// enqueue-shared: T threads calling enqueue on one Producer; enqueue-per-thread (`per_thread`):
/// each on a Producer of its own.
void time_shared_enqueue(const Args& a, bool per_thread) {
  std::vector<std::unique_ptr<streamq::Producer>> producers;
  for (int i = 0; i < (per_thread ? a.threads : 1); ++i) {
    producers.push_back(std::make_unique<streamq::Producer>(producer_options(a)));
    producers.back()->enqueue("send_email", kPayload);  // connect outside the timed part
  }
  std::vector<std::thread> threads;
  const long each = a.count / a.threads;
  const auto t = Clock::now();
  for (int i = 0; i < a.threads; ++i) {
    streamq::Producer& p = *producers[per_thread ? static_cast<std::size_t>(i) : 0];
    threads.emplace_back([&p, each] {
      for (long k = 0; k < each; ++k) p.enqueue("send_email", kPayload);
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = seconds_since(t);
  Args done = a;
  done.count = each * a.threads;
  report(done, seconds,
         " threads=" + std::to_string(a.threads) +
             " connections=" + std::to_string(connections_named(a.url, "streamq-producer")));
}

/// enqueue-async: one thread, at most kWindow calls unanswered.
void time_async_enqueue(const Args& a) {
  constexpr long kWindow = 4096;
  streamq::Producer p(producer_options(a));
  p.enqueue("send_email", kPayload);
  std::mutex m;
  std::condition_variable cv;
  long answered = 0;
  long failed = 0;
  const auto t = Clock::now();
  for (long i = 0; i < a.count; ++i) {
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return i - answered < kWindow; });
    }
    p.enqueue_async("send_email", kPayload, {}, [&](std::exception_ptr error, const std::string&) {
      std::lock_guard lock(m);
      ++answered;
      failed += error ? 1 : 0;
      cv.notify_one();
    });
  }
  std::unique_lock lock(m);
  cv.wait(lock, [&] { return answered == a.count; });
  report(a, seconds_since(t), " failed=" + std::to_string(failed));
}

/// One round of the chord scenario: `count` tracked tasks enqueued then drained (as_chord false),
/// or the same tasks as the header of a chord whose callback reads their results (true). The
/// seconds from the enqueue to the last task's end (the callback's, for a chord); for a chord,
/// the ms from the last header task's handler return to the callback's start in `parent_ms`.
double chord_round(const Args& a, bool as_chord, double& parent_ms) {
  const std::string stream = a.stream + (as_chord ? ":chord" : ":tracked");
  Args own = a;
  own.stream = stream;
  streamq::Producer p(producer_options(own));
  p.enqueue_batch({});
  std::atomic<long> done{0};
  std::atomic<bool> finished{false};
  std::atomic<std::int64_t> last_child_end{0};
  std::int64_t parent_start = 0;
  streamq::Consumer c(consumer_options(own));
  const auto child = [&](const streamq::Task& t) {
    t.set_result("1");
    const std::int64_t now = Clock::now().time_since_epoch().count();
    std::int64_t seen = last_child_end.load();
    while (seen < now && !last_child_end.compare_exchange_weak(seen, now)) {
    }
    if (++done == a.count && !as_chord) finish(finished);
  };
  c.on("child", child);
  // --away 1: a chord's header in another queue of one partition, with a consumer of its own.
  const std::string away_stream = stream + ":away";
  std::optional<streamq::Consumer> away;
  if (as_chord && a.away) {
    Args there = own;
    there.stream = away_stream;
    there.partitions = 1;
    away.emplace(consumer_options(there));
    away->on("child", child);
  }
  c.on("callback", [&](const streamq::Task& t) {
    parent_start = Clock::now().time_since_epoch().count();
    if (static_cast<long>(t.children_results().size()) != a.count)
      throw std::runtime_error("children missing");
    finish(finished);
  });
  const streamq::Retention kept{.done = std::chrono::minutes(1)};
  std::vector<streamq::TaskSpec> tasks(static_cast<std::size_t>(a.count),
                                       streamq::TaskSpec{"child", kPayload, {.retention = kept}});
  const auto t = Clock::now();
  if (as_chord && a.away) {
    streamq::FlowNode root{.task_type = "callback", .payload = "{}", .options = {.retention = kept}};
    for (streamq::TaskSpec& task : tasks) {
      root.children.push_back({.task_type = task.task_type,
                               .payload = std::move(task.payload),
                               .options = task.options,
                               .queue = streamq::FlowQueue{.stream = away_stream}});
    }
    p.enqueue_flow(root);
  } else if (as_chord) {
    p.enqueue_flow(streamq::chord(std::move(tasks), {"callback", "{}", {.retention = kept}}));
  } else {
    p.enqueue_batch(tasks);
  }
  std::thread away_runner;
  if (away) away_runner = std::thread([&] { run_until(*away, finished); });
  run_until(c, finished);
  if (away_runner.joinable()) away_runner.join();
  const double seconds = seconds_since(t);
  parent_ms = static_cast<double>(parent_start - last_child_end.load()) / 1e6;
  return seconds;
}

/// fairness (issue 45): handlers that take 1 ms, two consumers of concurrency 8. Tenant A's
/// a.count tasks are queued and the consumers started; 0.5 s later each of 9 other tenants
/// enqueues 100. Reports `between`: the tasks that started after those 900 were enqueued, until
/// the last of them started (about 1,000 when the tenants are served in turn; about a.count in
/// a FIFO queue: --tenants 0 sends the same tasks without tenants). --weight W gives the 9
/// other tenants weight W (A keeps 1).
void time_fairness(const Args& a) {
  const bool fifo = a.tenants == 0;
  constexpr int kOthers = 9;
  constexpr long kEach = 100;
  const auto other = [](int i) { return "other-" + std::to_string(i); };
  if (!fifo && a.weight != 1) {
    streamq::Inspector in({.connection = {.url = a.url}});
    for (int i = 0; i < kOthers; ++i) in.set_tenant(a.stream, other(i), {.weight = a.weight});
  }
  streamq::Producer p(producer_options(a));
  {
    std::vector<streamq::TaskSpec> tasks;
    for (long done = 0; done < a.count; done += a.batch) {
      tasks.assign(static_cast<std::size_t>(std::min(a.batch, a.count - done)),
                   {"a", kPayload, {.tenant = fifo ? "" : "A"}});
      p.enqueue_batch(tasks);
    }
  }
  std::atomic<long> started{0}, others_started{0}, at_last{-1};
  std::atomic<bool> finished{false};
  const auto consumer = [&] {
    streamq::ConsumerOptions o = consumer_options(a);
    o.concurrency = 8;
    o.prefetch = std::max(o.prefetch, o.concurrency);
    auto c = std::make_unique<streamq::Consumer>(o);
    c->on("a", [&](const streamq::Task&) {
      ++started;
      std::this_thread::sleep_for(1ms);
    });
    c->on("other", [&](const streamq::Task&) {
      const long n = ++started;
      if (++others_started == kOthers * kEach) {
        at_last = n;
        finish(finished);
      }
      std::this_thread::sleep_for(1ms);
    });
    return c;
  };
  auto first = consumer(), second = consumer();
  std::jthread run_first([&] { first->run(); }), run_second([&] { second->run(); });
  const auto t = Clock::now();
  std::this_thread::sleep_for(500ms);
  for (int i = 0; i < kOthers; ++i) {
    p.enqueue_batch(
        std::vector<streamq::TaskSpec>(kEach, {"other", kPayload, {.tenant = fifo ? "" : other(i)}}));
  }
  const long at_enqueued = started.load();
  finished.wait(false);
  const double seconds = seconds_since(t);
  first->stop();
  second->stop();
  run_first.join();
  run_second.join();
  report(a, seconds,
         " between=" + std::to_string(at_last.load() - at_enqueued) +
             " started=" + std::to_string(started.load()));
}

/// The server's used_memory (INFO memory), in bytes.
long long used_memory(RawClient& c) {
  c.command({"INFO", "memory"});
  redisReply* r = c.reply();
  const std::string info(r->str, r->len);
  freeReplyObject(r);
  const auto at = info.find("used_memory:");
  return std::stoll(info.substr(at + 12));
}

/// tenants-memory (issue 45): a.count tenants with one task each. Reports the server's bytes per
/// tenant while its task waits in its backlog (`with_work_bytes`), once drained
/// (`drained_bytes`: a tenant with nothing left leaves no keys), and with its own settings
/// stored (`settings_bytes`, Inspector::set_tenant); tasks_per_s: the drain of the a.count tasks.
void time_tenants_memory(const Args& a) {
  RawClient raw(a);
  const auto per_tenant = [&](long long before) {
    return static_cast<double>(used_memory(raw) - before) / static_cast<double>(a.count);
  };
  const long long base = used_memory(raw);
  {
    streamq::Producer p(producer_options(a));
    enqueue_tenants(p, a.count, a.batch, a.count);
  }
  const double with_work = per_tenant(base);
  std::atomic<long> done{0};
  std::atomic<bool> finished{false};
  streamq::Consumer c(consumer_options(a));
  c.on("send_email", [&](const streamq::Task&) {
    if (++done == a.count) finish(finished);
  });
  const auto t = Clock::now();
  run_until(c, finished);
  const double seconds = seconds_since(t);
  // The consumer group and the stream's own entries stay: the queue's, not the tenants'.
  raw.command({"XTRIM", a.stream, "MAXLEN", "0"});
  freeReplyObject(raw.reply());
  const double drained = per_tenant(base);
  const long long before_settings = used_memory(raw);
  {
    streamq::Inspector in({.connection = {.url = a.url}});
    for (long i = 0; i < a.count; ++i) in.set_tenant(a.stream, "t" + std::to_string(i), {.concurrency = 4});
  }
  const double settings = per_tenant(before_settings);
  char extra[200];
  std::snprintf(extra, sizeof extra, " with_work_bytes=%lld drained_bytes=%lld settings_bytes=%lld",
                std::llround(with_work), std::llround(drained), std::llround(settings));
  report(a, seconds, extra);
}

int scenario_main(const Args& a) {
  if (a.scenario == "chord") {
    // A chord of `count` tasks against the same tasks tracked, interleaved, three rounds each.
    std::vector<double> tracked, chorded, parent;
    for (int round = 0; round < 3; ++round) {
      double ms = 0;
      tracked.push_back(chord_round(a, false, ms));
      chorded.push_back(chord_round(a, true, ms));
      parent.push_back(ms);
    }
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    char extra[200];
    std::snprintf(extra, sizeof extra, " tracked_s=%.4f chord_overhead=%.2f parent_start_ms=%.2f",
                  median(tracked), median(chorded) / median(tracked), median(parent));
    report(a, median(chorded), extra);
    return 0;
  }
  if (a.scenario == "enqueue") {
    streamq::Producer p(producer_options(a));
    p.enqueue("send_email", kPayload);  // connect outside the timed part
    const auto t = Clock::now();
    for (long i = 0; i < a.count; ++i) p.enqueue("send_email", kPayload);
    report(a, seconds_since(t));
  } else if (a.scenario == "enqueue-shared" || a.scenario == "enqueue-per-thread") {
    time_shared_enqueue(a, a.scenario == "enqueue-per-thread");
  } else if (a.scenario == "enqueue-async") {
    time_async_enqueue(a);
  } else if (a.scenario == "enqueue-batch" || a.scenario == "preload") {
    streamq::Producer p(producer_options(a));
    p.enqueue_batch({});
    const auto t = Clock::now();
    if (a.tenants > 0) {
      enqueue_tenants(p, a.count, a.batch, a.tenants);
    } else {
      enqueue_batches(p, a.count, a.batch);
    }
    if (a.scenario == "enqueue-batch") report(a, seconds_since(t), " batch=" + std::to_string(a.batch));
  } else if (a.scenario == "drain") {
    time_drain(a);
  } else if (a.scenario == "fairness") {
    time_fairness(a);
  } else if (a.scenario == "tenants-memory") {
    time_tenants_memory(a);
  } else if (a.scenario == "drain-levels") {
    {
      streamq::Producer p(producer_options(a));
      std::vector<streamq::TaskSpec> tasks;
      const streamq::Priority levels[] = {streamq::Priority::high, streamq::Priority::normal,
                                          streamq::Priority::low};
      for (long done = 0; done < a.count; done += a.batch) {
        tasks.clear();
        for (long i = done; i < std::min(a.count, done + a.batch); ++i) {
          tasks.push_back({"send_email", kPayload, {.priority = levels[i % 3]}});
        }
        p.enqueue_batch(tasks);
      }
    }
    time_drain(a);
  } else if (a.scenario == "enqueue-raw") {
    enqueue_raw(a);
  } else if (a.scenario == "drain-raw") {
    drain_raw(a);
  } else if (a.scenario == "latency") {
    std::vector<std::atomic<std::int64_t>> sent(static_cast<std::size_t>(a.count));
    std::vector<double> latency_us(static_cast<std::size_t>(a.count));
    std::atomic<long> done{0};
    std::atomic<bool> finished{false};
    streamq::Consumer c(consumer_options(a));
    c.on("send_email", [&](const streamq::Task& t) {
      const auto now = Clock::now().time_since_epoch().count();
      const auto i = static_cast<std::size_t>(t.json()["i"].get<long>());
      std::int64_t s;
      while ((s = sent[i].load()) == 0) std::this_thread::yield();  // enqueue has not returned yet
      latency_us[i] = static_cast<double>(std::max<std::int64_t>(0, now - s)) / 1000.0;
      if (++done == a.count) finish(finished);
    });
    std::thread producer([&] {
      streamq::Producer p(producer_options(a));
      p.enqueue("warmup", "{}");
      const auto start = Clock::now();
      const auto interval = std::chrono::nanoseconds(1000000000L / a.rate);
      for (long i = 0; i < a.count; ++i) {
        std::this_thread::sleep_until(start + i * interval);  // the offered rate
        p.enqueue("send_email", "{\"i\":" + std::to_string(i) + "}");
        sent[static_cast<std::size_t>(i)] = Clock::now().time_since_epoch().count();
      }
    });
    const auto t = Clock::now();
    c.on_unknown([](const streamq::Task&) {});
    run_until(c, finished);
    producer.join();
    report(a, seconds_since(t), " offered_per_s=" + std::to_string(a.rate) + percentiles(latency_us));
  } else if (a.scenario == "forward") {
    // Delayed tasks all due at one moment, then forwarded by one consumer's forwarder (its
    // handlers drain them meanwhile, as they would): the rate is tasks moved out of the
    // delayed set per second from the due time on.
    streamq::Producer p(producer_options(a));
    // Far enough ahead that every task is still delayed when the preload ends (a task
    // enqueued after its due time goes straight to the stream, and would never be forwarded).
    const auto due = std::chrono::system_clock::now() + std::chrono::seconds(3 + a.count / 25000);
    enqueue_batches(p, a.count, a.batch, {.run_at = due});
    if (std::chrono::system_clock::now() >= due) {
      throw std::runtime_error("forward: the preload took longer than the due offset; use a smaller --count");
    }
    std::atomic<long> done{0};
    std::atomic<bool> finished{false};
    streamq::Consumer c(consumer_options(a));
    c.on("send_email", [&](const streamq::Task&) {
      if (++done == a.count) finish(finished);
    });
    double forward_seconds = 0;
    // Timed from the due time itself, not from when this thread woke after it: a watch that
    // wakes late (a busy machine) would otherwise time only the tail (one run printed 0.000003 s).
    std::thread watch([&] {
      std::this_thread::sleep_until(due);
      while (c.metrics().forwarded < static_cast<std::uint64_t>(a.count) && !finished.load()) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      forward_seconds = std::chrono::duration<double>(std::chrono::system_clock::now() - due).count();
    });
    run_until(c, finished);
    watch.join();
    report(a, forward_seconds);
  } else if (a.scenario == "wait") {
    std::atomic<bool> finished{false};
    streamq::Consumer c(consumer_options(a));
    c.on("send_email", [](const streamq::Task& t) { t.set_result(t.payload()); });
    std::vector<double> latency_us;
    std::thread caller([&] {
      streamq::Producer p(producer_options(a));
      p.enqueue_and_wait("send_email", kPayload, {}, std::chrono::seconds(10));  // warm up
      for (long i = 0; i < a.count; ++i) {
        const auto t = Clock::now();
        p.enqueue_and_wait("send_email", kPayload, {}, std::chrono::seconds(10));
        latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
      }
      finish(finished);
    });
    const auto t = Clock::now();
    run_until(c, finished);
    caller.join();
    report(a, seconds_since(t), percentiles(latency_us));
  } else if (a.scenario == "progress") {
    std::atomic<bool> finished{false};
    streamq::Consumer c(consumer_options(a));
    std::vector<double> latency_us;
    latency_us.reserve(static_cast<std::size_t>(a.count));
    double seconds = 0;
    c.on("send_email", [&](const streamq::Task& task) {
      const auto start = Clock::now();
      for (long i = 0; i < a.count; ++i) {
        const auto t = Clock::now();
        task.set_progress(i);
        latency_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
      }
      seconds = seconds_since(start);
      finish(finished);
    });
    streamq::Producer p(producer_options(a));
    p.enqueue("send_email", kPayload, {.retention = streamq::Retention{}});
    run_until(c, finished);
    // The writes the calls cost: one 'progress' event each (coalesced: at most one per 100 ms).
    streamq::Inspector in({.connection = {.url = a.url}});
    long writes = 0;
    for (const streamq::QueueEvent& e : in.events(a.stream, "", 10000).events)
      writes += e.event == "progress";
    report(a, seconds, percentiles(latency_us) + " writes=" + std::to_string(writes));
  } else if (a.scenario == "retry" || a.scenario == "retry-backoff") {
    streamq::Producer p(producer_options(a));
    enqueue_batches(p, a.count, a.batch);
    std::atomic<long> done{0};
    std::atomic<bool> finished{false};
    streamq::ConsumerOptions o = consumer_options(a);
    // retry: at once, straight back to the stream. retry-backoff: each retry waits up to
    // 20 ms in the delayed set and is forwarded from there.
    o.retry_backoff = {.base = std::chrono::milliseconds(a.scenario == "retry" ? 0 : 20),
                       .cap = std::chrono::milliseconds(20)};
    streamq::Consumer c(o);
    c.on("send_email", [&](const streamq::Task& t) {
      if (t.retry_count() == 0) throw std::runtime_error("first attempt fails");
      if (++done == a.count) finish(finished);
    });
    streamq::set_log_level(streamq::LogLevel::warning);  // as for the earlier versions this is compared with,
                                                         // which logged each retry at info
    const auto t = Clock::now();
    run_until(c, finished);
    report(a, seconds_since(t));
  } else {
    throw std::invalid_argument("unknown scenario " + a.scenario);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return scenario_main(parse(argc, argv));
  } catch (const std::invalid_argument& e) {
    std::cerr << "streamq-bench: " << e.what()
              << "\nusage: streamq-bench "
                 "enqueue|enqueue-batch|enqueue-shared|enqueue-per-thread|enqueue-async|enqueue-raw|preload|"
                 "drain|drain-levels|"
                 "drain-raw|"
                 "latency|retry"
              << "|retry-backoff|forward|wait|progress|chord|fairness|tenants-memory"
              << " --url URL [--stream S] [--count N] [--batch B] [--rate R] [--concurrency C] [--prefetch F]"
              << " [--partitions P] [--tracked 1] [--executor process] [--overflow trim_oldest] [--away 1]"
              << " [--tenants T] [--weight W]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "streamq-bench: " << e.what() << '\n';
    return 1;
  }
}
