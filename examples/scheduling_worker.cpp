// SPDX-License-Identifier: MIT
// streamq-scheduling-worker: a worker that also schedules. Its Scheduler enqueues a
// `cleanup` task on a cron expression and a `heartbeat` task every N seconds; its Consumer
// runs them. Start it several times: every instance runs tasks, and each tick is still
// enqueued once. Stops on SIGINT/SIGTERM and prints both metrics.
//
//   streamq-scheduling-worker --stream task_queue --cron '*/5 * * * *' --every 10
#include <chrono>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>

#include <streamq/streamq.hpp>

#include "flags.hpp"

namespace {

constexpr const char* kUsage =
    "usage: streamq-scheduling-worker [--url redis://127.0.0.1:6379] [--stream task_queue]\n"
    "                                 [--cron '*/5 * * * *'] [--every 10] [--missed enqueue_once|skip]\n";

}  // namespace

int main(int argc, char** argv) {
  if (example::wants_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{{"--url", "redis://127.0.0.1:6379"},
                                           {"--stream", "task_queue"},
                                           {"--cron", "*/5 * * * *"},
                                           {"--every", "10"},
                                           {"--missed", "enqueue_once"}};
  int every_seconds = 0;
  try {
    example::parse_flags(argc, argv, flags);
    every_seconds = example::to_int("--every", flags["--every"], 1);
    if (flags["--missed"] != "enqueue_once" && flags["--missed"] != "skip") {
      throw std::invalid_argument("--missed must be enqueue_once or skip");
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "streamq-scheduling-worker: " << e.what() << '\n' << kUsage;
    return 2;
  }

  try {
    streamq::Scheduler scheduler(
        {.queue = {.connection = {.url = flags["--url"]}, .stream = flags["--stream"]},
         .missed =
             flags["--missed"] == "skip" ? streamq::MissedTicks::skip : streamq::MissedTicks::enqueue_once});
    scheduler.add("cleanup", streamq::Schedule::cron(flags["--cron"]), "cleanup", {{"older_than_days", 30}});
    scheduler.add("heartbeat", streamq::Schedule::every(std::chrono::seconds(every_seconds)), "heartbeat",
                  "{}", {.max_retries = 0});  // a missed heartbeat is replaced by the next one

    streamq::Consumer consumer(
        {.connection = {.url = flags["--url"]}, .stream = flags["--stream"], .stop_on_signals = true});
    consumer.on("cleanup", [](const streamq::Task& task) {
      std::cout << "cleanup " << task.id() << ": older than " << task.json().at("older_than_days") << " days"
                << std::endl;
    });
    consumer.on("heartbeat",
                [](const streamq::Task& task) { std::cout << "heartbeat " << task.id() << std::endl; });

    scheduler.start();
    std::cout << "scheduling cleanup (" << flags["--cron"] << ") and heartbeat (every " << every_seconds
              << " s) on " << flags["--stream"] << "; Ctrl-C to stop" << std::endl;
    consumer.run();  // until SIGINT/SIGTERM
    scheduler.stop();

    const streamq::SchedulerMetrics s = scheduler.metrics();
    const streamq::ConsumerMetrics c = consumer.metrics();
    std::cout << "scheduler: enqueued=" << s.enqueued << " taken=" << s.taken << " skipped=" << s.skipped
              << " refused=" << s.refused << " errors=" << s.errors << "\nconsumer: done=" << c.done
              << " retried=" << c.retried << " dead_lettered=" << c.dead_lettered << std::endl;
  } catch (const streamq::Error& e) {
    std::cerr << "streamq-scheduling-worker: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
