// SPDX-License-Identifier: MIT
#include "scheduler/tick_script.hpp"

#include <algorithm>

#include "scheduler/cron.hpp"
#include "util/durations.hpp"
#include "wire/codec.hpp"

namespace streamq::detail {
namespace {

const char* mode_text(TickMode m) {
  switch (m) {
    case TickMode::release: return "release";
    case TickMode::backfill: return "backfill";
    case TickMode::tick: break;
  }
  return "tick";
}

/// The KEYS index of the stream of the priority level (the script's KEYS).
const char* destination(Priority p) {
  switch (p) {
    case Priority::high: return "3";
    case Priority::low: return "4";
    case Priority::normal: break;
  }
  return "1";
}

}  // namespace

std::string tick_task_id(std::string_view name, std::chrono::system_clock::time_point tick) {
  return std::string(name) + "@" + format_tick(tick);
}

std::string tick_retention(const ScheduledTaskOptions& options) {
  if (options.retention) return retention_field(*options.retention);
  if (options.overlap != Overlap::allow) return retention_field(Retention{.done = std::chrono::hours(1)});
  return {};
}

TickReply call_tick_script(ScriptRunner& scripts, const QueueKeys& keys, const std::string& record,
                           const RunningDefinition& d, const QueueOptions& queue, const TickCall& call) {
  const Definition& def = d.def;
  const ScheduledTaskOptions& o = def.options;
  const std::string ticks = ticks_key(record);
  const std::string task_id = tick_task_id(def.name, call.tick);
  const std::string created_at = format_timestamp(call.now);
  const std::string retention = tick_retention(o);
  NewTask task{task_id, def.task_type, def.payload, created_at, d.max_retries, &o.extra_fields};
  task.retention = retention;

  Argv argv = scripts.begin(ScriptId::schedule_tick, 6);
  argv.add(keys.stream).add(record).add(keys.high).add(keys.low).add(keys.delayed).add(ticks);
  argv.add(mode_text(call.mode)).add(unix_ms(call.tick)).add(call.late ? "1" : "0");
  argv.add(call.missed == MissedTicks::skip ? "skip" : "enqueue_once");
  argv.add(queue.overflow == Overflow::reject ? "reject" : "trim").add(queue.max_len);
  argv.add(task_id).add(d.version).add(destination(o.priority));
  if (o.limit) {
    argv.add(*o.limit);
  } else {
    argv.add("");
  }
  argv.add(overlap_text(o.overlap))  // (the stored form's names: the script's ARGV[11])
      .add(unix_ms(std::max(call.tick, call.late_through)));
  append_new_task(argv, task);
  const Reply reply = scripts.call(ScriptId::schedule_tick, argv);
  const ReplyView v = reply.view().check();

  TickReply out;
  out.code = v[0].integer();
  if (v.size() > 1) out.detail = v[1].is_integer() ? std::to_string(v[1].integer()) : std::string(v[1].str());
  if (out.code == tick_code::enqueued && v.size() > 2) out.enqueued = v[2].integer();
  if (out.code == tick_code::taken && v.size() > 2 && !v[2].str().empty()) {
    out.buffered = from_unix_ms(std::stoll(std::string(v[2].str())));
  }
  return out;
}

}  // namespace streamq::detail
