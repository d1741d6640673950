// SPDX-License-Identifier: MIT
// streamq enqueue: one task, or JSON lines from stdin (--stdin) in pipelined batches.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

struct EnqueueArgs {
  std::string queue, type, payload;
  bool from_stdin = false;
  std::int64_t delay_ms = 0;
  std::int64_t retention_ms = -1;
  std::int64_t max_len = ProducerOptions{}.max_len;
  std::string priority = "normal";
  int partitions = 1;
  EnqueueOptions eo;
};

/// A line of --stdin: {"type": ..., "payload": ..., "task_id"?, "delay_ms"?, "priority"?, "tenant"?}.
TaskSpec parse_line(const std::string& text, const EnqueueOptions& eo) {
  TaskSpec spec;
  const nlohmann::json j = nlohmann::json::parse(text);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    throw std::invalid_argument("an object with a string \"type\" is needed");
  }
  spec.task_type = j["type"].get<std::string>();
  spec.payload = j.contains("payload") ? j["payload"].dump() : std::string("{}");
  spec.options = eo;
  if (j.contains("task_id")) spec.options.task_id = j["task_id"].get<std::string>();
  if (j.contains("delay_ms"))
    spec.options.delay = std::chrono::milliseconds(j["delay_ms"].get<std::int64_t>());
  if (j.contains("tenant")) spec.options.tenant = j["tenant"].get<std::string>();
  if (j.contains("priority")) {
    const auto p = parse_priority(j["priority"].get<std::string>());
    if (!p) throw std::invalid_argument("priority must be high, normal or low");
    spec.options.priority = *p;
  }
  return spec;
}

/// JSON lines from stdin, sent in batches of 500, each one pipelined and checked whole before
/// the next is read.
int enqueue_lines(const Context& g, Producer& producer, const EnqueueOptions& eo) {
  ProgressLine line("enqueued");
  std::vector<TaskSpec> batch;
  std::int64_t done = 0, line_no = 0;
  const auto flush = [&] {
    if (batch.empty()) return;
    try {
      producer.enqueue_batch(batch);
    } catch (const EnqueueRefusedError& e) {
      // The tasks of the batch before the refused one were written: count them in what is said.
      done += static_cast<std::int64_t>(e.accepted());
      line.finish();
      // The first task not written was refused: when it names a tenant, its tenant's own
      // max_len is what to raise.
      const auto& ids = e.batch_ids();
      const auto refused =
          static_cast<std::size_t>(std::find(ids.begin(), ids.end(), std::string()) - ids.begin());
      const bool tenant_full = refused < batch.size() && !batch[refused].options.tenant.empty();
      const char* hint = !dynamic_cast<const QueueFullError*>(&e) ? ""
                         : tenant_full
                             ? " (a larger max_len of that tenant, `streamq tenants set`, lets more in)"
                             : " (a larger --max-len lets more in)";
      throw Error(std::string(e.what()) + "; " + std::to_string(done) +
                  " tasks were enqueued, from the first line on, and none after the refused one was written" +
                  hint);
    }
    done += static_cast<std::int64_t>(batch.size());
    batch.clear();
    line.update(done, 0);
  };
  std::string text;
  while (!interrupted.load() && std::getline(std::cin, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    TaskSpec spec;
    try {
      spec = parse_line(text, eo);
    } catch (const std::exception& e) {
      flush();
      line.finish();
      std::cerr << "streamq: stdin line " << line_no << ": " << e.what() << "; " << done
                << " tasks were enqueued before it, none after\n";
      return usage;
    }
    batch.push_back(std::move(spec));
    if (batch.size() == 500) flush();
  }
  if (!interrupted.load()) flush();
  line.finish();
  if (g.json()) {
    std::cout << nlohmann::json{{"enqueued", done}, {"finished", !interrupted.load()}}.dump() << "\n";
  } else {
    std::cout << "enqueued " << done
              << (interrupted.load() ? " (interrupted: lines after these were not sent)" : "") << "\n";
  }
  return interrupted.load() ? aborted : ok;
}

int enqueue(const Context& g, EnqueueArgs a) {
  if (a.from_stdin != a.type.empty()) {
    std::cerr << "streamq enqueue: give a task type, or --stdin, not both\n";
    return usage;
  }
  EnqueueOptions& eo = a.eo;
  eo.delay = std::chrono::milliseconds(a.delay_ms);
  if (a.retention_ms >= 0) eo.retention = Retention{.done = std::chrono::milliseconds(a.retention_ms)};
  eo.priority = *parse_priority(a.priority);
  Producer producer(
      {.connection = {.url = g.url}, .stream = a.queue, .max_len = a.max_len, .partitions = a.partitions});
  if (a.from_stdin) return enqueue_lines(g, producer, eo);
  const std::string id = producer.enqueue(a.type, a.payload.empty() ? std::string("{}") : a.payload, eo);
  if (g.json()) {
    std::cout << nlohmann::json{{"task_id", id}}.dump() << "\n";
  } else {
    std::cout << id << "\n";
  }
  return ok;
}

}  // namespace

void add_enqueue(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<EnqueueArgs>();
  auto* sub =
      add_queue_command(app, "enqueue", "enqueue a task, or JSON lines from stdin with --stdin", a->queue);
  sub->add_option("type", a->type, "task type (not with --stdin)");
  sub->add_option("payload", a->payload, "JSON payload (default {})");
  sub->add_flag("--stdin", a->from_stdin,
                "read JSON lines {\"type\":…, \"payload\":…, \"task_id\"?, \"delay_ms\"?, \"priority\"?, "
                "\"tenant\"?}");
  sub->add_option("--task-id", a->eo.task_id, "task id (default: a new UUID)");
  sub->add_option("--delay-ms", a->delay_ms, "run no sooner than this many ms from now")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--retention-ms", a->retention_ms,
                  "track the tasks: keep their records this many ms once done (a dead one's as long as "
                  "its dead letter); see `streamq task` and `streamq events`")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-len", a->max_len, "refuse tasks once the queue holds this many unfinished ones")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_priority(sub, a->priority, "high, normal or low");
  sub->add_option("--partitions", a->partitions,
                  "the queue's partitions (its producers' ProducerOptions::partitions)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_option("--partition-key", a->eo.partition_key, "tasks with one key go to one partition");
  sub->add_option("--tenant", a->eo.tenant,
                  "the tenant the tasks belong to: they wait in its backlog and run in its turn (see "
                  "`streamq tenants`)");
  on_run(sub, ctx, [&ctx, a] { return enqueue(ctx, *a); });
}

}  // namespace streamq::cli
