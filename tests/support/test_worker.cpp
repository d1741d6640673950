// SPDX-License-Identifier: MIT
// A worker process for the reliability tests, which kill it with SIGKILL and start it again.
// Usage: streamq_test_worker <url> <stream> <consumer-name> [key=value ...]
//        streamq_test_worker <url> <stream> enqueue <type> <payload> [delay_ms]
//   (the second form enqueues one task, prints its id and exits: a producer in a process of its
//   own, e.g. under faketime)
//   concurrency, prefetch, min_idle_ms, heartbeat_ms, reclaim_ms, max_deliveries, grace_ms,
//   backoff_base_ms (retry backoff, default 0: at once), backoff_cap_ms
// Task types:
//   work       sleep payload "ms" milliseconds, then HINCRBY <stream>:done <task_id> 1
//   hang       HINCRBY <stream>:started <task_id> 1, sleep "ms" ignoring stop requests, then
//              record like work
//   fail_once  sleep "ms", throw on the first attempt (retry_count 0), record like work
//   crash      HINCRBY <stream>:attempts <task_id> 1, then abort() the process
// Records go through the test's own Redis connection (one per handler thread).
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <streamq/streamq.hpp>

#include "connection.hpp"

namespace {

std::string g_url;

void record(const std::string& key, const std::string& task_id) {
  thread_local std::unique_ptr<streamq::detail::Connection> conn;
  if (!conn) {
    streamq::ConnectionOptions o;
    o.url = g_url;
    conn =
        std::make_unique<streamq::detail::Connection>(streamq::detail::make_connection_config(o, "recorder"));
  }
  conn->command(streamq::detail::Argv{"HINCRBY", key, task_id, "1"}).view().check();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: streamq_test_worker <url> <stream> <consumer> [key=value ...]\n";
    return 2;
  }
  g_url = argv[1];
  const std::string stream = argv[2];
  if (std::string(argv[3]) == "enqueue") {
    streamq::Producer producer({.connection = {.url = g_url}, .stream = stream});
    streamq::EnqueueOptions eo;
    if (argc > 6) eo.delay = std::chrono::milliseconds(std::stol(argv[6]));
    std::cout << producer.enqueue(argc > 4 ? argv[4] : "work", argc > 5 ? argv[5] : "{}", eo) << std::endl;
    return 0;
  }
  std::map<std::string, long> kv;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    kv[a.substr(0, eq)] = std::stol(a.substr(eq + 1));
  }
  auto get = [&](const char* k, long def) { return kv.count(k) ? kv[k] : def; };
  using ms = std::chrono::milliseconds;
  streamq::Consumer consumer(
      {.connection = {.url = g_url},
       .stream = stream,
       .consumer_name = argv[3],
       .concurrency = static_cast<int>(get("concurrency", 2)),
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
  consumer.on("fail_once", [&](const streamq::Task& task) {
    const int sleep_ms = task.json().value("ms", 0);
    if (sleep_ms > 0) std::this_thread::sleep_for(ms(sleep_ms));
    if (task.retry_count() == 0) throw std::runtime_error("first attempt fails");
    record(stream + ":done", task.id());
  });
  consumer.on("hang", [&](const streamq::Task& task) {
    record(stream + ":started", task.id());
    std::this_thread::sleep_for(ms(task.json().value("ms", 0)));
    record(stream + ":done", task.id());
  });
  consumer.on("crash", [&](const streamq::Task& task) {
    record(stream + ":attempts", task.id());
    std::abort();
  });
  consumer.run();
  return 0;
}
