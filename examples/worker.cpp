// SPDX-License-Identifier: MIT
// streamq-worker: runs the demo task types (send_email, generate_pdf, reindex, remind, and
// always_fail, which fails through its retries, each after a backoff, into the dead-letter
// stream) until SIGINT or SIGTERM, or with --exit-when-idle MS once no task arrived for that long. (Entries
// another worker left pending are reclaimed every reclaim_interval, 5 s by default: an idle time shorter than
// that can exit before taking them.)
//
//   streamq-worker --stream task_queue --concurrency 4
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include <streamq/streamq.hpp>

#include "flags.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kUsage =
    "usage: streamq-worker [--url redis://127.0.0.1:6379] [--stream task_queue]\n"
    "                      [--group workers] [--consumer NAME] [--concurrency 4]\n"
    "                      [--exit-when-idle MS] [--retry-base-ms 1000] [--partitions 1]\n";

/// Handlers run on several threads: one mutex keeps each output line whole.
void say(const std::string& line) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::cout << line << std::endl;
}

/// When a handler last started or finished a task. Handlers store it, the idle watch reads it.
class Activity {
 public:
  void touch() noexcept { last_.store(Clock::now().time_since_epoch().count()); }
  Clock::time_point last() const noexcept { return Clock::time_point(Clock::duration(last_.load())); }

 private:
  std::atomic<Clock::rep> last_{Clock::now().time_since_epoch().count()};
};

/// Calls consumer.stop() once `activity` lies `idle` in the past. Destroy it before the
/// consumer: its thread uses the consumer.
class IdleWatch {
 public:
  IdleWatch(streamq::Consumer& consumer, const Activity& activity, milliseconds idle)
      : thread_([this, &consumer, &activity, idle] {
          std::unique_lock lock(mutex_);
          for (;;) {
            // Handlers only store a timestamp; waking once per idle period to re-check it
            // costs less than notifying on every task.
            if (cv_.wait_until(lock, activity.last() + idle, [this] { return done_; })) return;
            if (Clock::now() >= activity.last() + idle) {
              say("no task for " + std::to_string(idle.count()) + " ms; stopping");
              consumer.stop();
              return;
            }
          }
        }) {}

  ~IdleWatch() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  IdleWatch(const IdleWatch&) = delete;
  IdleWatch& operator=(const IdleWatch&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last member: starts after the others are built
};

/// A demo handler returns a short note on what it did, or throws.
using DemoHandler = std::function<std::string(const streamq::Task&)>;

/// Wraps a demo handler: one output line per attempt, and activity for the idle watch. An
/// exception still propagates, so the Consumer retries or dead-letters the task.
streamq::Consumer::Handler logged(DemoHandler handler, Activity& activity) {
  return [handler = std::move(handler), &activity](const streamq::Task& task) {
    activity.touch();
    const std::string what =
        task.type() + " " + task.id() + " retry_count=" + std::to_string(task.retry_count());
    try {
      const std::string note = handler(task);
      activity.touch();
      say("done   " + what + " (" + note + ")");
    } catch (const std::exception& e) {
      activity.touch();
      const auto since_enqueue =
          std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now() - task.created_at());
      say("failed " + what + ": " + e.what() + " (" + std::to_string(since_enqueue.count()) +
          " ms after it was enqueued)");
      throw;
    }
  };
}

/// The payload's `key` as text; "?" when the payload has no such key.
std::string payload_text(const streamq::Task& task, const char* key) {
  const nlohmann::json& p = task.json();
  if (!p.is_object() || !p.contains(key)) return "?";
  return p[key].is_string() ? p[key].get<std::string>() : p[key].dump();
}

void simulate_work(milliseconds duration) { std::this_thread::sleep_for(duration); }

std::string send_email(const streamq::Task& task) {
  const std::string to = payload_text(task, "to");
  // Retrying cannot fix a missing address: PermanentError dead-letters the task at once.
  if (to == "?") throw streamq::PermanentError("payload has no \"to\" address");
  simulate_work(milliseconds(5));
  return "email to " + to;
}

std::string generate_pdf(const streamq::Task& task) {
  simulate_work(milliseconds(15));
  return "report " + payload_text(task, "report_type") + " " + payload_text(task, "period");
}

std::string reindex(const streamq::Task& task) {
  simulate_work(milliseconds(10));
  return "indexed into " + payload_text(task, "index");
}

std::string always_fail(const streamq::Task&) { throw std::runtime_error("simulated failure"); }

/// Enqueued with a delay: says how long after its enqueue it ran.
std::string remind(const streamq::Task& task) {
  const auto waited =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now() - task.created_at());
  return "reminder " + payload_text(task, "what") + ", ran " + std::to_string(waited.count()) +
         " ms after it was enqueued";
}

}  // namespace

int main(int argc, char** argv) {
  if (example::wants_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{{"--url", "redis://127.0.0.1:6379"},
                                           {"--stream", "task_queue"},
                                           {"--group", "workers"},
                                           {"--consumer", ""},
                                           {"--concurrency", "4"},
                                           {"--exit-when-idle", ""},
                                           {"--retry-base-ms", "1000"},
                                           {"--partitions", "1"}};
  int concurrency = 0;
  int exit_when_idle_ms = 0;
  int retry_base_ms = 0;
  int partitions = 1;
  try {
    example::parse_flags(argc, argv, flags);
    concurrency = example::to_int("--concurrency", flags["--concurrency"], 1);
    if (!flags["--exit-when-idle"].empty()) {
      exit_when_idle_ms = example::to_int("--exit-when-idle", flags["--exit-when-idle"], 1);
    }
    retry_base_ms = example::to_int("--retry-base-ms", flags["--retry-base-ms"], 0);
    partitions = example::to_int("--partitions", flags["--partitions"], 1);
  } catch (const std::invalid_argument& e) {
    std::cerr << "streamq-worker: " << e.what() << '\n' << kUsage;
    return 2;
  }

  // Outlives the consumer: a handler still running past the shutdown grace period may touch it.
  Activity activity;
  try {
    streamq::ConsumerOptions options{.stream = flags["--stream"],
                                     .group = flags["--group"],
                                     .consumer_name = flags["--consumer"],  // empty: generated
                                     .concurrency = concurrency,
                                     .partitions = partitions,
                                     .stop_on_signals = true,
                                     // A failed attempt waits a random time up to base * 2^n.
                                     .retry_backoff = {.base = milliseconds(retry_base_ms)}};
    options.connection.url = flags["--url"];
    streamq::Consumer consumer(options);
    consumer.on("send_email", logged(send_email, activity));
    consumer.on("generate_pdf", logged(generate_pdf, activity));
    consumer.on("reindex", logged(reindex, activity));
    consumer.on("always_fail", logged(always_fail, activity));
    consumer.on("remind", logged(remind, activity));
    // Declared after the consumer, so it is destroyed (and its thread joined) first.
    std::optional<IdleWatch> idle_watch;
    if (exit_when_idle_ms > 0) idle_watch.emplace(consumer, activity, milliseconds(exit_when_idle_ms));

    say("worker " + consumer.name() + " on " + flags["--stream"] + " (group " + flags["--group"] +
        "); Ctrl-C to stop");
    consumer.run();

    const streamq::ConsumerMetrics m = consumer.metrics();
    say("metrics: done=" + std::to_string(m.done) + " retried=" + std::to_string(m.retried) +
        " dead_lettered=" + std::to_string(m.dead_lettered) + " reclaimed=" + std::to_string(m.reclaimed) +
        " replayed=" + std::to_string(m.replayed) + " skipped=" + std::to_string(m.skipped) +
        " stale=" + std::to_string(m.stale) + " reconnects=" + std::to_string(m.reconnects) +
        " forwarded=" + std::to_string(m.forwarded));
  } catch (const streamq::Error& e) {
    std::cerr << "streamq-worker: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
