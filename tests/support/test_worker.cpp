// SPDX-License-Identifier: MIT
// A worker process for the reliability tests, which kill it with SIGKILL and start it again.
// Usage: streamq_test_worker <url> <stream> <consumer-name> [key=value ...]
//   (exits with status 3 when run() throws ConfigError, e.g. for a consumer name in use)
//        streamq_test_worker <url> <stream> enqueue <type> <payload> [delay_ms]
//   (the second form enqueues one task, prints its id and exits: a producer in a process of its
//   own, e.g. under faketime)
//        streamq_test_worker <url> <stream> enqueue-json <options as JSON>
//   (one task enqueued with the options the JSON object gives, see enqueue_described; prints
//   its id)
//        streamq_test_worker <url> <stream> produce <tasks-per-second> <seconds>
//   (the fourth enqueues "mark" tasks numbered 0, 1, ... at that steady rate, retrying a refused
//   or failed enqueue, until SIGTERM or the time is up; prints "produced <count>": the soak's
//   producer)
//   partitions (a partitioned queue: concurrency must be at least this), concurrency, prefetch, min_idle_ms,
//   heartbeat_ms, reclaim_ms, max_deliveries, grace_ms, backoff_base_ms (retry backoff, default 0: at once),
//   backoff_cap_ms, app_thread (1: a thread of the application's own is started before run(), as an HTTP
//   server's would be), app_fork (a file: 300 ms after run() started, the application forks a helper without
//   exec, which writes its pid there and sleeps until killed, holding copies of the worker's descriptors)
// Task types:
//   work       sleep payload "ms" milliseconds, then HINCRBY <stream>:done <task_id> 1
//   hang       HINCRBY <stream>:started <task_id> 1, sleep "ms" ignoring stop requests, then
//              record like work
//   fail_once  sleep "ms", throw on the first attempt (retry_count 0), record like work
//   fail_unreplayed  sleep "ms", throw unless the task was replayed (its replay_count field),
//              then record like work
//   crash      HINCRBY <stream>:attempts <task_id> 1, then abort() the process
//   mark       SETBIT <stream>:seen <payload "n"> 1, and INCR <stream>:again when the bit was set
//              already (a task run twice)
//   limited    with ConcurrencyLimit{limit} (key limit=, default 3): SADD <stream>:now-running
//              "<consumer>/<task_id>" (unless the test named this consumer in <stream>:killed),
//              raise <stream>:most to SCARD of it, sleep "ms", SREM, then record like work
//   sleeper    (process executor) writes its pid to payload "file" + ".child", then runs
//              system("echo $$ > <file>; exec sleep 40"): a grandchild that holds what the child
//              holds, its pid in "file"
//   spinner    (process executor) writes its pid to payload "file", then spins until killed
//   fenced     with ConcurrencyLimit{limit}: as limited, but runs until asked to stop (at most
//              "ms"), then SET <stream>:stopped:<task_id> to the time it saw the request (ms since
//              the Unix epoch, this machine's clock) and its stop reason, SREM, and throws
//   polite     RPUSH <stream>:log "<consumer>/<task_id> start", run "ms" unless asked to stop, then
//              RPUSH "... end" and return, or (asked to stop) RPUSH "... stopped" and throw
//   describe   returns (Task::set_result) what it was given, as JSON: {"id", "type", "payload" (the
//              text), "retry_count", "max_retries", "created_at_ms", "fields" (every field: an array
//              of [name, value])}; throws on the first attempt when the payload says "fail_once"
//   collect    a flow's parent: returns its children's results as JSON, an array of {"task_id",
//              "state", "result", "error"} in order (the Python client's tests, tests/python)
// Records go through the test's own Redis connection (one per handler thread).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <streamq/streamq.hpp>

#include "redis/connection.hpp"

namespace {

std::string g_url;

/// This handler thread's own connection for its records.
streamq::detail::Connection& recorder() {
  thread_local std::unique_ptr<streamq::detail::Connection> conn;
  if (!conn) {
    streamq::ConnectionOptions o;
    o.url = g_url;
    conn =
        std::make_unique<streamq::detail::Connection>(streamq::detail::make_connection_config(o, "recorder"));
  }
  return *conn;
}

void record(const std::string& key, const std::string& task_id) {
  recorder().command(streamq::detail::Argv{"HINCRBY", key, task_id, "1"}).view().check();
}

/// A limited or fenced handler starts: SADD <stream>:now-running `me`, and <stream>:most raised to
/// how many are in it now. Not for a consumer in <stream>:killed: the mark of a worker the test
/// killed may reach the server after the test took that worker's marks out (written just before
/// the kill), and would then stay in the set as if its task still ran.
void enter_running(const std::string& stream, const std::string& consumer, const std::string& me) {
  recorder()
      .command(streamq::detail::Argv{
          "EVAL",
          "if redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 1 then return end "
          "redis.call('SADD', KEYS[1], ARGV[1]) local n = redis.call('SCARD', KEYS[1]) "
          "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end",
          "3", stream + ":now-running", stream + ":most", stream + ":killed", me, consumer})
      .view()
      .check();
}

/// Writes this process's pid to `file` (whole: written aside, then renamed).
void write_pid(const std::string& file) {
  {
    std::ofstream out(file + ".tmp");
    out << getpid() << "\n";
  }
  std::rename((file + ".tmp").c_str(), file.c_str());
}

std::atomic<bool> g_stop{false};

/// The soak's producer: "mark" tasks 0, 1, ... at `rate` per second for `seconds`.
int produce(const std::string& stream, long rate, long seconds) {
  std::signal(SIGTERM, [](int) { g_stop = true; });
  std::signal(SIGINT, [](int) { g_stop = true; });
  streamq::Producer producer({.connection = {.url = g_url}, .stream = stream, .max_len = 1000000});
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  long n = 0;
  long refused = 0;
  while (!g_stop && std::chrono::steady_clock::now() < end) {
    // Due by now: n tasks at `rate` per second since the start.
    const auto elapsed = std::chrono::steady_clock::now() - start;
    const long due =
        static_cast<long>(std::chrono::duration<double>(elapsed).count() * static_cast<double>(rate));
    for (; n < due && !g_stop; ++n) {
      while (!g_stop) {
        try {
          producer.enqueue("mark", "{\"n\":" + std::to_string(n) + "}");
          break;
        } catch (const streamq::Error& e) {  // a restart of Redis, a full queue: try again
          if (++refused % 100 == 1) std::cerr << "produce: " << e.what() << "\n";
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::cout << "produced " << n << std::endl;
  return 0;
}

}  // namespace

// The options of one task, from a JSON object (the Python client's tests compare what the C++
// Producer writes with what the Python one writes): "type", "payload" (JSON text), and any of
// "task_id", "max_retries", "extra_fields" ([[name, value], ...]), "delay_ms", "run_at_ms" and
// "deadline_ms" (Unix ms), "priority" ("high", "normal", "low"), "unique_for_ms",
// "unique_key", "partition_key", "retention" ({"done_ms", "dead_ms"}), "batch", "tenant",
// "debounce" ({"key", "window_ms", "mode": "keep_first" or "replace_latest"}). Prints the id
// enqueue returned (a debounced call's: the task that will run).
int enqueue_described(const std::string& stream, const std::string& description) {
  using std::chrono::milliseconds;
  const auto d = nlohmann::json::parse(description);
  const auto at = [](std::int64_t ms) { return std::chrono::system_clock::time_point(milliseconds(ms)); };
  streamq::EnqueueOptions eo;
  eo.task_id = d.value("task_id", "");
  if (d.contains("max_retries")) eo.max_retries = d["max_retries"].get<int>();
  for (const auto& pair : d.value("extra_fields", nlohmann::json::array()))
    eo.extra_fields.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
  eo.delay = milliseconds(d.value("delay_ms", 0));
  if (d.contains("run_at_ms")) eo.run_at = at(d["run_at_ms"].get<std::int64_t>());
  if (d.contains("deadline_ms")) eo.deadline = at(d["deadline_ms"].get<std::int64_t>());
  const std::string priority = d.value("priority", "normal");
  eo.priority = priority == "high"  ? streamq::Priority::high
                : priority == "low" ? streamq::Priority::low
                                    : streamq::Priority::normal;
  eo.unique_for = milliseconds(d.value("unique_for_ms", 0));
  eo.unique_key = d.value("unique_key", "");
  eo.partition_key = d.value("partition_key", "");
  if (d.contains("retention")) {
    streamq::Retention r{.done = milliseconds(d["retention"].value("done_ms", 0))};
    if (d["retention"].contains("dead_ms"))
      r.dead = milliseconds(d["retention"]["dead_ms"].get<std::int64_t>());
    eo.retention = r;
  }
  eo.batch = d.value("batch", "");
  eo.tenant = d.value("tenant", "");
  if (d.contains("debounce")) {
    const auto& db = d["debounce"];
    eo.debounce = streamq::Debounce{.key = db.value("key", ""),
                                    .window = milliseconds(db.value("window_ms", 0)),
                                    .mode = db.value("mode", "keep_first") == "replace_latest"
                                                ? streamq::DebounceMode::replace_latest
                                                : streamq::DebounceMode::keep_first};
  }
  streamq::Producer producer({.connection = {.url = g_url}, .stream = stream});
  std::cout << producer.enqueue(d.at("type").get<std::string>(), d.at("payload").get<std::string>(), eo)
            << std::endl;
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: streamq_test_worker <url> <stream> <consumer> [key=value ...]\n";
    return 2;
  }
  g_url = argv[1];
  const std::string stream = argv[2];
  if (std::string(argv[3]) == "produce") {
    if (argc != 6) {
      std::cerr << "usage: streamq_test_worker <url> <stream> produce <tasks-per-second> <seconds>\n";
      return 2;
    }
    return produce(stream, std::stol(argv[4]), std::stol(argv[5]));
  }
  if (std::string(argv[3]) == "enqueue-json") {
    if (argc != 5) {
      std::cerr << "usage: streamq_test_worker <url> <stream> enqueue-json <options as JSON>\n";
      return 2;
    }
    return enqueue_described(stream, argv[4]);
  }
  if (std::string(argv[3]) == "enqueue") {
    streamq::Producer producer({.connection = {.url = g_url}, .stream = stream});
    streamq::EnqueueOptions eo;
    if (argc > 6) eo.delay = std::chrono::milliseconds(std::stol(argv[6]));
    std::cout << producer.enqueue(argc > 4 ? argv[4] : "work", argc > 5 ? argv[5] : "{}", eo) << std::endl;
    return 0;
  }
  std::map<std::string, long> kv;
  std::string app_fork;  // the one key whose value is a path
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (a.substr(0, eq) == "app_fork") {
      app_fork = a.substr(eq + 1);
    } else {
      kv[a.substr(0, eq)] = std::stol(a.substr(eq + 1));
    }
  }
  auto get = [&](const char* k, long def) { return kv.count(k) ? kv[k] : def; };
  using ms = std::chrono::milliseconds;
  streamq::Consumer consumer(
      {.connection = {.url = g_url},
       .stream = stream,
       .consumer_name = argv[3],
       .concurrency = static_cast<int>(get("concurrency", 2)),
       .partitions = static_cast<int>(get("partitions", 1)),
       .prefetch = static_cast<int>(get("prefetch", 8)),
       .block = ms(200),
       .claim_min_idle = ms(get("min_idle_ms", 1500)),
       .reclaim_interval = ms(get("reclaim_ms", 250)),
       .heartbeat_interval = ms(get("heartbeat_ms", 300)),
       .max_deliveries = static_cast<int>(get("max_deliveries", 5)),
       .shutdown_grace = ms(get("grace_ms", 10000)),
       .stop_on_signals = true,
       .retry_backoff = {.base = ms(get("backoff_base_ms", 0)), .cap = ms(get("backoff_cap_ms", 600000))}});
  consumer.on("work", [&](const streamq::Task& task) {
    const int sleep_ms = task.json().value("ms", 0);
    if (sleep_ms > 0) std::this_thread::sleep_for(ms(sleep_ms));
    record(stream + ":done", task.id());
  });
  // A flow's parent: how many of its children it read (<stream>:children, the fewest seen).
  consumer.on("gather", [&](const streamq::Task& task) {
    const auto n = static_cast<std::int64_t>(task.children_results().size());
    recorder()
        .command(streamq::detail::Argv{"HSET", stream + ":children", task.id(), std::to_string(n)})
        .view()
        .check();
    record(stream + ":done", task.id());
  });
  consumer.on("fail_once", [&](const streamq::Task& task) {
    const int sleep_ms = task.json().value("ms", 0);
    if (sleep_ms > 0) std::this_thread::sleep_for(ms(sleep_ms));
    if (task.retry_count() == 0) throw std::runtime_error("first attempt fails");
    record(stream + ":done", task.id());
  });
  consumer.on("fail_unreplayed", [&](const streamq::Task& task) {
    const int sleep_ms = task.json().value("ms", 0);
    if (sleep_ms > 0) std::this_thread::sleep_for(ms(sleep_ms));
    if (!task.field("replay_count")) throw std::runtime_error("fails until replayed");
    record(stream + ":done", task.id());
  });
  consumer.on("hang", [&](const streamq::Task& task) {
    record(stream + ":started", task.id());
    std::this_thread::sleep_for(ms(task.json().value("ms", 0)));
    record(stream + ":done", task.id());
  });
  consumer.on("mark", [&](const streamq::Task& task) {
    const std::string n = std::to_string(task.json().at("n").get<long>());
    const streamq::detail::Reply was =
        recorder().command(streamq::detail::Argv{"SETBIT", stream + ":seen", n, "1"});
    if (was.view().check().integer() == 1)
      recorder().command(streamq::detail::Argv{"INCR", stream + ":again"}).view().check();
  });
  consumer.on("limited",
              [&](const streamq::Task& task) {
                const std::string me = std::string(argv[3]) + "/" + task.id();
                enter_running(stream, argv[3], me);
                std::this_thread::sleep_for(ms(task.json().value("ms", 0)));
                recorder().command(streamq::detail::Argv{"SREM", stream + ":now-running", me}).view().check();
                record(stream + ":done", task.id());
              },
              {.concurrency = {.limit = static_cast<int>(get("limit", 3))}});
  consumer.on("fenced",
              [&](const streamq::Task& task) {
                const std::string me = std::string(argv[3]) + "/" + task.id();
                enter_running(stream, argv[3], me);
                const auto until = std::chrono::steady_clock::now() + ms(task.json().value("ms", 0));
                while (!task.stop_requested() && std::chrono::steady_clock::now() < until)
                  std::this_thread::sleep_for(ms(2));
                const auto seen =
                    std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch());
                recorder()
                    .command(streamq::detail::Argv{
                        "SET", stream + ":stopped:" + task.id(),
                        std::to_string(seen.count()) + " " + std::string(task.stop_reason())})
                    .view()
                    .check();
                recorder().command(streamq::detail::Argv{"SREM", stream + ":now-running", me}).view().check();
                throw std::runtime_error("stopped");
              },
              {.concurrency = {.limit = static_cast<int>(get("limit", 3))}});
  consumer.on("polite", [&](const streamq::Task& task) {
    const std::string me = std::string(argv[3]) + "/" + task.id();
    const auto log = [&](const char* what) {
      recorder().command(streamq::detail::Argv{"RPUSH", stream + ":log", me + " " + what}).view().check();
    };
    log("start");
    const auto until = std::chrono::steady_clock::now() + ms(task.json().value("ms", 0));
    while (!task.stop_requested() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(ms(2));
    if (task.stop_requested()) {
      log("stopped");
      throw std::runtime_error("stopped");
    }
    log("end");
  });
  consumer.on("describe", [](const streamq::Task& task) {
    nlohmann::json fields = nlohmann::json::array();
    for (const auto& [name, value] : task.fields()) fields.push_back({name, value});
    if (task.json().is_object() && task.json().value("fail_once", false) && task.retry_count() == 0) {
      throw std::runtime_error("failing once, as asked");
    }
    const auto created_at_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(task.created_at().time_since_epoch()).count();
    const nlohmann::json seen = {{"id", task.id()},
                                 {"type", task.type()},
                                 {"payload", task.payload()},
                                 {"retry_count", task.retry_count()},
                                 {"max_retries", task.max_retries()},
                                 {"created_at_ms", created_at_ms},
                                 {"fields", fields}};
    task.set_result(seen.dump());
  });
  consumer.on("collect", [](const streamq::Task& task) {
    nlohmann::json out = nlohmann::json::array();
    for (const streamq::ChildResult& c : task.children_results()) {
      out.push_back({{"task_id", c.task_id}, {"state", c.state}, {"result", c.result}, {"error", c.error}});
    }
    task.set_result(out.dump());
  });
  consumer.on(
      "sleeper",
      [](const streamq::Task& task) {
        const std::string file = task.json().at("file").get<std::string>();
        write_pid(file + ".child");
        if (std::system(
                ("echo $$ > " + file + ".tmp && mv " + file + ".tmp " + file + "; exec sleep 40").c_str()) !=
            0) {
          throw std::runtime_error("sleep ended early");
        }
      },
      {.executor = streamq::HandlerExecutor::process});
  consumer.on("spinner",
              [](const streamq::Task& task) {
                write_pid(task.json().at("file").get<std::string>());
                std::atomic<std::uint64_t> n{0};
                for (;;) n.fetch_add(1, std::memory_order_relaxed);
              },
              {.executor = streamq::HandlerExecutor::process});
  consumer.on("crash", [&](const streamq::Task& task) {
    record(stream + ":attempts", task.id());
    std::abort();
  });
  if (get("app_thread", 0) == 1)
    std::thread([] { std::this_thread::sleep_for(std::chrono::hours(1)); }).detach();
  if (!app_fork.empty()) {
    // The application forks a helper (no exec) after run() started the fork server: the helper
    // holds a copy of every descriptor the worker had then, the fork server's socket among them.
    std::thread([app_fork] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (fork() == 0) {
        write_pid(app_fork);
        for (;;) pause();
      }
    }).detach();
  }
  try {
    consumer.run();
  } catch (const streamq::ConfigError& e) {  // e.g. its consumer name is in use
    std::cerr << "streamq_test_worker: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
