// SPDX-License-Identifier: MIT
// Turning a task and its EnqueueOptions into what is written (checks, partition, fields,
// retention field, deadline, lock), and the XADD or enqueue script call that writes it.
#include <algorithm>
#include <chrono>
#include <optional>

#include "prepare.hpp"
#include "producer_impl.hpp"
#include "redis/cluster.hpp"
#include "redis/scripts.hpp"
#include "streamq/errors.hpp"
#include "util/durations.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {

using detail::Prepared;

void Producer::Impl::check_tenant(const EnqueueOptions& eo) const {
  if (eo.tenant.empty()) return;
  detail::check_tenant_name(eo.tenant);
  if (options.partitions > 1 && (eo.unique_for.count() > 0 || !eo.batch.empty())) {
    throw ConfigError(
        "a tenant's task in a partitioned queue cannot be unique or join a batch (it goes to its "
        "tenant's partition, where the lock or the batch may not be)");
  }
  if (options.partitions > 1 && eo.debounce) {
    throw ConfigError(
        "a tenant's task in a partitioned queue cannot be debounced (it goes to its tenant's "
        "partition, not its debounce key's, where the key's waiting task may be)");
  }
}

void Producer::Impl::check_debounce(const EnqueueOptions& eo) {
  if (!eo.debounce) return;
  const Debounce& d = *eo.debounce;
  if (d.key.empty()) throw ConfigError("debounce.key must not be empty");
  if (d.window.count() <= 0) throw ConfigError("debounce.window must be > 0");
  detail::check_duration(d.window, std::chrono::milliseconds(1), "debounce.window");
  if (d.mode != DebounceMode::keep_first && d.mode != DebounceMode::replace_latest) {
    throw ConfigError("debounce.mode must be DebounceMode::keep_first or DebounceMode::replace_latest");
  }
  // The task waits out the window from the call (plus its delay): an absolute time has no window.
  if (eo.run_at)
    throw ConfigError("debounce and run_at: a debounced task runs a window after its call (use delay)");
  // A duplicate of a unique task is refused, a debounced call is absorbed: one call cannot be both.
  if (eo.unique_for.count() > 0) throw ConfigError("debounce and unique_for: set one of them, not both");
  // The key's state lives in the key's partition: another partition key would split a burst.
  if (!eo.partition_key.empty()) {
    throw ConfigError("debounce and partition_key: a debounced task goes to its debounce key's partition");
  }
  // A batch counts its members: a dropped call would be a member that never ends.
  if (!eo.batch.empty()) throw ConfigError("debounce and batch: a debounced task cannot join a batch");
}

void Producer::Impl::refuse_debounce(const EnqueueOptions& eo, std::string_view call) {
  if (eo.debounce) {
    throw ConfigError(std::string(call) +
                      ": a task cannot have debounce here (a dropped or replaced call has no task of its "
                      "own to return; enqueue it with enqueue)");
  }
}

int Producer::Impl::partition_of(const EnqueueOptions& eo, std::string_view unique_key) {
  if (options.partitions == 1) return 0;
  // A batch's task goes where its batch is (open_batch: the batch id's partition).
  // A tenant's task goes where its tenant's keys are, so that its limits hold across the queue.
  // A debounced task goes where its key's state is, so one script call sees it.
  const std::string_view key = !eo.tenant.empty()          ? std::string_view(eo.tenant)
                               : !eo.batch.empty()         ? std::string_view(eo.batch)
                               : eo.debounce               ? std::string_view(eo.debounce->key)
                               : !eo.partition_key.empty() ? std::string_view(eo.partition_key)
                                                           : unique_key;
  if (!key.empty()) return static_cast<int>(detail::crc16(key) % static_cast<unsigned>(options.partitions));
  return static_cast<int>(next_partition.fetch_add(1, std::memory_order_relaxed) %
                          static_cast<unsigned>(options.partitions));
}

Prepared Producer::Impl::prepare(std::string_view type, std::string_view payload, const EnqueueOptions& eo,
                                 std::string& id_storage, std::string_view created_at) {
  if (type.empty()) throw ConfigError("task_type must not be empty");
  if (eo.max_retries && *eo.max_retries < 0) throw ConfigError("max_retries must be >= 0");
  for (const auto& [name, value] : eo.extra_fields) {
    if (name.empty() || detail::is_reserved_field(name)) {
      throw ConfigError("extra field name \"" + name + "\" is empty or reserved");
    }
  }
  detail::check_duration(eo.delay, std::chrono::milliseconds(0), "delay");
  if (eo.delay.count() > 0 && eo.run_at) throw ConfigError("delay and run_at: set one of them, not both");
  // Checked before anything is written: the lock's SET PX comes after the XADD, in one script.
  detail::check_duration(eo.unique_for, std::chrono::milliseconds(0), "unique_for");
  if (!eo.unique_key.empty() && eo.unique_for.count() == 0) {
    throw ConfigError("unique_key needs unique_for > 0");
  }
  if (!eo.batch.empty()) {
    // A batch's members must all end (an entry trimmed unread never would), and go to the
    // batch's partition (the unique key's, where its lock would be, may differ).
    if (options.overflow == Overflow::trim_oldest) {
      throw ConfigError("a batch's task needs Overflow::reject: trim_oldest may drop it unfinished");
    }
    if (eo.unique_for.count() > 0 && options.partitions > 1) {
      throw ConfigError(
          "a batch's task cannot be unique in a partitioned queue (its lock would be in the "
          "batch's partition, not the unique key's)");
    }
  }
  check_tenant(eo);
  check_debounce(eo);
  if (eo.priority != Priority::high && eo.priority != Priority::normal && eo.priority != Priority::low) {
    throw ConfigError("priority must be Priority::high, Priority::normal or Priority::low");
  }
  if (auto problem = detail::payload_problem(payload, options.max_payload_bytes, options.max_payload_depth)) {
    throw PayloadError(*problem);
  }
  // 13 standard fields at most (with unique_key, retention, deadline, batch_id, and a flow's
  // flow_parent, flow_on_failure and flow_children, or flow_home in place of flow_children on a
  // child in another partition: a parent has no flow_home), and 2 more on a retry copy (last_error,
  // retry_of_span): a consumer dead-letters an entry with more than kMaxFields, and Lua's
  // unpack() cannot pass many more to one XADD.
  if (eo.extra_fields.size() + 15 > detail::kMaxFields) {
    throw ConfigError("too many extra fields: " + std::to_string(eo.extra_fields.size()) + " (at most " +
                      std::to_string(detail::kMaxFields - 15) + ")");
  }
  id_storage = eo.task_id.empty() ? detail::new_uuid_v4() : eo.task_id;
  Prepared p;
  p.task = detail::NewTask{
      id_storage,      type, payload, created_at, eo.max_retries.value_or(options.default_max_retries),
      &eo.extra_fields};
  p.dest = eo.priority == Priority::high ? 2 : eo.priority == Priority::low ? 3 : 1;
  if (eo.run_at) {
    // 1 ms after the epoch stands for any time already past: "due now" (0 means no due time).
    p.at_ms = std::max<std::int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(eo.run_at->time_since_epoch()).count());
  }
  p.delay_ms = eo.delay.count();
  if (p.at_ms > 0 || p.delay_ms > 0) p.nonce = detail::new_uuid_v4();
  if (eo.unique_for.count() > 0) {
    p.task.unique_key =
        eo.unique_key.empty() ? std::string_view(id_storage) : std::string_view(eo.unique_key);
  }
  if (const std::optional<Retention>& r = eo.retention ? eo.retention : options.retention) {
    p.retention = detail::retention_field(*r);
  } else if (!eo.batch.empty()) {
    p.retention =
        detail::retention_field(Retention{.done = std::chrono::hours(1)});  // a batch counts its tasks' ends
  }
  p.task.batch_id = eo.batch;
  p.task.tenant = eo.tenant;
  if (eo.deadline) {
    if (*eo.deadline > std::chrono::system_clock::now() + detail::kMaxDuration) {
      throw ConfigError("deadline must be at most ten years from now");
    }
    // 1 ms after the epoch stands for any time already past (as run_at).
    p.deadline = std::to_string(std::max<std::int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(eo.deadline->time_since_epoch()).count()));
  }
  p.partition = partition_of(eo, p.task.unique_key);
  if (eo.unique_for.count() > 0) {
    p.lock_key =
        detail::unique_lock_key(keys[static_cast<std::size_t>(p.partition)].stream, p.task.unique_key);
    p.lock_ms = eo.unique_for.count();
  }
  if (eo.debounce) {
    p.debounce_key =
        detail::debounce_key(keys[static_cast<std::size_t>(p.partition)].stream, eo.debounce->key);
    p.debounce_ms = eo.debounce->window.count();
    p.debounce_mode = eo.debounce->mode == DebounceMode::replace_latest ? "replace_latest" : "keep_first";
    if (p.nonce.empty()) p.nonce = detail::new_uuid_v4();  // it waits in the delayed set
  }
  return p;
}

detail::Argv Producer::Impl::trim_argv(const Prepared& p) const {
  detail::Argv argv{"XADD", keys[static_cast<std::size_t>(p.partition)].stream, "MAXLEN", "~", max_len_text,
                    "*"};
  detail::append_new_task(argv, p.written_task());
  return argv;
}

namespace {

/// One enqueue script call for `n` tasks, `at(i)` the i-th, written to `k` in `mode`; `plain`:
/// none of them needs the script's 'full' layout.
template <class At>
detail::Argv enqueue_call(At at, std::size_t n, const detail::QueueKeys& k, std::string_view mode,
                          const std::string& max_len_text, const std::string& refusal_mark,
                          std::int64_t position, bool plain) {
  std::size_t locks = 0;
  for (std::size_t i = 0; i < n; ++i) locks += at(i).lock_key.empty() ? 0 : 1;
  // A debounced task is enqueued alone (prepare refuses it in the calls of many tasks).
  const bool debounced = n == 1 && !at(0).debounce_key.empty();
  const int numkeys = static_cast<int>(4 + locks + (debounced ? 1 : 0) + (refusal_mark.empty() ? 0 : 1));
  detail::Argv argv = detail::ScriptRunner::begin_shared(detail::ScriptId::enqueue, numkeys);
  argv.add(k.stream).add(k.high).add(k.low).add(k.delayed);
  for (std::size_t i = 0; i < n; ++i) {
    if (!at(i).lock_key.empty()) argv.add(at(i).lock_key);
  }
  if (debounced) argv.add(at(0).debounce_key);
  if (!refusal_mark.empty()) argv.add(refusal_mark);
  argv.add(mode).add(max_len_text);
  argv.add(refusal_mark.empty() ? 0 : position).add(static_cast<std::int64_t>(n));
  argv.add(debounced ? "debounce" : plain ? "plain" : "full");
  if (plain) {
    for (std::size_t i = 0; i < n; ++i) {
      const detail::NewTask written = at(i).written_task();  // plain: no retention; a deadline
      argv.add(static_cast<std::int64_t>(detail::new_task_string_count(written)));
      detail::append_new_task(argv, written);
    }
    return argv;
  }
  if (debounced) {
    // The 'debounce' layout: one task, its state's key KEYS[5] (see enqueue.lua).
    const detail::Prepared& t = at(0);
    argv.add(t.dest).add(t.delay_ms).add(t.debounce_ms).add(t.debounce_mode).add(t.nonce);
    const detail::NewTask written = t.written_task();
    argv.add(static_cast<std::int64_t>(detail::new_task_string_count(written)));
    detail::append_new_task(argv, written);
    return argv;
  }
  std::int64_t lock_index = 4;
  for (std::size_t i = 0; i < n; ++i) {
    const detail::Prepared& t = at(i);
    argv.add(t.dest).add(t.at_ms).add(t.delay_ms);
    argv.add(t.lock_key.empty() ? 0 : ++lock_index).add(t.lock_ms).add(t.nonce);
    const detail::NewTask written = t.written_task();
    argv.add(static_cast<std::int64_t>(detail::new_task_string_count(written)));
    detail::append_new_task(argv, written);
  }
  return argv;
}

}  // namespace

detail::Argv Producer::Impl::script_argv(const std::vector<Prepared>& tasks, std::size_t first,
                                         std::size_t last, const std::string& refusal_mark,
                                         std::int64_t position, const detail::QueueKeys* to) const {
  const detail::QueueKeys& k = to != nullptr ? *to : keys[static_cast<std::size_t>(tasks[first].partition)];
  const bool plain = std::none_of(tasks.begin() + static_cast<std::ptrdiff_t>(first),
                                  tasks.begin() + static_cast<std::ptrdiff_t>(last), needs_script);
  return enqueue_call([&](std::size_t i) -> const Prepared& { return tasks[first + i]; }, last - first, k,
                      options.overflow == Overflow::reject ? "reject" : "trim", max_len_text, refusal_mark,
                      position, plain);
}

detail::Argv Producer::Impl::merged_argv(const std::vector<const Prepared*>& tasks) const {
  const detail::QueueKeys& k = keys[static_cast<std::size_t>(tasks.front()->partition)];
  return enqueue_call([&](std::size_t i) -> const Prepared& { return *tasks[i]; }, tasks.size(), k, "each",
                      max_len_text, {}, 0, true);
}

bool Producer::Impl::needs_script(const Prepared& t) {
  return t.dest != 1 || t.at_ms > 0 || t.delay_ms > 0 || !t.lock_key.empty() || !t.retention.empty() ||
         !t.task.tenant.empty() || !t.debounce_key.empty();
}

}  // namespace streamq
