// SPDX-License-Identifier: MIT
#include "streamq/producer.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <random>

#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "streamq/errors.hpp"
#include "streamq/tracing.hpp"
#include "util/durations.hpp"
#include "util/middleware_chain.hpp"
#include "waiter.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {
namespace {

// The enqueue script's reply for a chunk not run because an earlier chunk of its batch was not.
constexpr std::int64_t kBehindUnrun = -1;
constexpr std::size_t kChunk = 64;  // tasks per enqueue script call: small enough that Redis runs one
                                    // chunk while the next is formatted (measured: 64 beats 16-256)

ProducerOptions validated(ProducerOptions o) {
  if (o.stream.empty()) throw ConfigError("stream must not be empty");
  if (o.max_len <= 0) throw ConfigError("max_len must be > 0");
  if (o.overflow != Overflow::reject && o.overflow != Overflow::trim_oldest) {
    throw ConfigError("overflow must be Overflow::reject or Overflow::trim_oldest");
  }
  if (o.retention) {
    detail::check_duration(o.retention->done, std::chrono::milliseconds(0), "retention.done");
    if (o.retention->dead)
      detail::check_duration(*o.retention->dead, std::chrono::milliseconds(0), "retention.dead");
  }
  if (o.max_payload_bytes == 0) throw ConfigError("max_payload_bytes must be > 0");
  if (o.max_payload_depth < 1) throw ConfigError("max_payload_depth must be >= 1");
  if (o.default_max_retries < 0) throw ConfigError("default_max_retries must be >= 0");
  if (o.min_replicas_acked < 0) throw ConfigError("min_replicas_acked must be >= 0");
  if (o.min_replicas_acked > 0) {
    detail::check_duration(o.replicas_ack_timeout, std::chrono::milliseconds(1), "replicas_ack_timeout");
  }
  detail::check_partitions(o.partitions, o.stream);
  if (o.min_replicas_acked > 0 &&
      o.connection.socket_timeout <= o.replicas_ack_timeout + std::chrono::seconds(1)) {
    throw ConfigError(
        "connection.socket_timeout must exceed replicas_ack_timeout by more than 1 s (WAIT blocks "
        "that long)");
  }
  return o;
}

bool is_queue_full(const detail::Reply& r) {
  return r.view().is_error() && r.view().error().starts_with("QUEUEFULL");
}

struct IndexRanges {
  std::size_t count = 0;
  std::string text;  // "0-63, 70"
};

/// The indices i of `ids` with ids[i].empty() == !written, as ranges.
IndexRanges index_ranges(const std::vector<std::string>& ids, bool written) {
  IndexRanges r;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty() == written) continue;
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1].empty() != written) ++j;
    if (!r.text.empty()) r.text += ", ";
    r.text += i == j ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j);
    r.count += j - i + 1;
    i = j;
  }
  return r;
}

/// "wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and wrote nothing after
/// the first refused one".
std::string batch_outcome(const std::vector<std::string>& ids) {
  const IndexRanges w = index_ranges(ids, true);
  const IndexRanges r = index_ranges(ids, false);
  auto described = [](const IndexRanges& x) {
    if (x.count == 0) return std::string("0");
    return std::to_string(x.count) + (x.count == 1 ? " (index " : " (indices ") + x.text + ")";
  };
  std::string m = "wrote " + std::to_string(w.count) + " of " + std::to_string(ids.size()) + " tasks";
  if (w.count > 0) m += described(w).substr(std::to_string(w.count).size());
  m += "; refused " + described(r);
  const bool prefix = std::all_of(ids.begin() + static_cast<std::ptrdiff_t>(w.count), ids.end(),
                                  [](const std::string& id) { return id.empty(); });
  if (prefix && w.count > 0) m += " and wrote nothing after the first refused one";
  return m;
}

/// "queue full: wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and wrote
/// nothing after the first refused one: <the server's message>".
std::string partial_batch_message(std::string_view what, const std::vector<std::string>& ids,
                                  const std::string& server_message) {
  return std::string(what) + ": " + batch_outcome(ids) + ": " + server_message;
}

/// A checked task and how the enqueue script is to write it.
struct Prepared {
  detail::NewTask task;
  std::int64_t dest = 1;      // KEYS index of its stream in the enqueue script: 1 normal, 2 high, 3 low
  std::int64_t at_ms = 0;     // run_at, ms since the epoch (0 = none)
  std::int64_t delay_ms = 0;  // delay (0 = none)
  std::string nonce;          // keeps equal delayed tasks apart in the delayed set
  std::string lock_key;       // its uniqueness lock, or empty
  std::int64_t lock_ms = 0;
  int partition = 0;  // ProducerOptions::partitions
  // A tracked task's retention field ("<done ms> <dead ms>"), or empty. Not viewed by `task`
  // (a Prepared moves, and a short string with it): written_task() points at it.
  std::string retention;
  std::string deadline;  // EnqueueOptions::deadline, ms since the epoch, or empty (as retention)

  /// The task to write, with its retention and deadline.
  detail::NewTask written_task() const {
    detail::NewTask t = task;
    t.retention = retention;
    t.deadline = deadline;
    return t;
  }
};

/// A DUPLICATE refusal of the enqueue script: "DUPLICATE <index> <id length> <id> holds <key>".
struct Duplicate {
  std::size_t index = 0;  // in the script call
  std::string holder;
  std::string key;
};

std::optional<Duplicate> parse_duplicate(const detail::Reply& r) {
  if (!r.view().is_error()) return std::nullopt;
  std::string_view e = r.view().error();
  if (!e.starts_with("DUPLICATE ")) return std::nullopt;
  e.remove_prefix(10);
  Duplicate d;
  const auto sp = e.find(' ');
  const auto index = detail::parse_count(e.substr(0, sp));
  if (sp == std::string_view::npos || !index) return std::nullopt;
  e.remove_prefix(sp + 1);
  const auto sp2 = e.find(' ');
  const auto length = detail::parse_count(e.substr(0, sp2));
  if (sp2 == std::string_view::npos || !length || sp2 + 1 + static_cast<std::size_t>(*length) > e.size()) {
    return std::nullopt;
  }
  d.index = static_cast<std::size_t>(*index);
  d.holder = std::string(e.substr(sp2 + 1, static_cast<std::size_t>(*length)));
  const std::string_view rest = e.substr(sp2 + 1 + static_cast<std::size_t>(*length));
  d.key = std::string(rest.starts_with(" holds ") ? rest.substr(7) : rest);
  return d;
}

/// A reply saying that the command was not run where it went and may be sent again as it is:
/// MOVED or ASK (its slot is served elsewhere), TRYAGAIN (a migration has split its keys).
bool sent_to_wrong_place(const detail::Reply& r) {
  if (!r.view().is_error()) return false;
  const std::string_view e = r.view().error();
  return e.starts_with("MOVED ") || e.starts_with("ASK ") || e.starts_with("TRYAGAIN");
}

/// The retention field of a tracked task: "<done ms> <dead ms>" (dead -1: as long as its dead
/// letter). @throws ConfigError for a negative or overlong duration.
std::string retention_field(const Retention& r) {
  detail::check_duration(r.done, std::chrono::milliseconds(0), "retention.done");
  if (r.dead) detail::check_duration(*r.dead, std::chrono::milliseconds(0), "retention.dead");
  return std::to_string(r.done.count()) + " " + std::to_string(r.dead ? r.dead->count() : -1);
}

std::string duplicate_message(const Duplicate& d) {
  return "duplicate task: unique lock " + d.key + " is held by task " + d.holder +
         " (enqueued within its unique_for window and not finished)";
}

}  // namespace

struct Producer::Impl {
  explicit Impl(ProducerOptions o)
      : options(validated(std::move(o))),
        conn(detail::make_connection_config(options.connection, "producer", first_partition(options))),
        scripts(conn),
        max_len_text(std::to_string(options.max_len)) {
    for (int i = 0; i < options.partitions; ++i) {
      keys.push_back(detail::queue_keys(detail::partition_stream(options.stream, options.partitions, i)));
    }
    // Producers that live for a few tasks (a request handler's, `streamq enqueue`) spread them too.
    if (options.partitions > 1) {
      next_partition = static_cast<int>(std::random_device{}() % static_cast<unsigned>(options.partitions));
    }
  }

  static std::string first_partition(const ProducerOptions& o) {
    return detail::partition_stream(o.stream, o.partitions, 0);
  }

  /// The partition of a task: by its partition key, else its unique key, else the next in turn.
  int partition_of(const EnqueueOptions& eo, std::string_view unique_key) {
    if (options.partitions == 1) return 0;
    const std::string_view key = !eo.partition_key.empty() ? std::string_view(eo.partition_key) : unique_key;
    if (!key.empty()) return static_cast<int>(detail::crc16(key) % static_cast<unsigned>(options.partitions));
    const int p = next_partition;
    next_partition = (next_partition + 1) % options.partitions;
    return p;
  }

  /// Checks one task and its per-call options; throws before anything is sent.
  Prepared prepare(std::string_view type, std::string_view payload, const EnqueueOptions& eo,
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
    if (eo.priority != Priority::high && eo.priority != Priority::normal && eo.priority != Priority::low) {
      throw ConfigError("priority must be Priority::high, Priority::normal or Priority::low");
    }
    if (auto problem =
            detail::payload_problem(payload, options.max_payload_bytes, options.max_payload_depth)) {
      throw PayloadError(*problem);
    }
    // 9 standard fields at most (with unique_key, retention, deadline), and 2 more on a retry
    // copy (last_error, retry_of_span); a consumer dead-letters an entry with more than
    // kMaxFields, and Lua's unpack() cannot pass many more to one XADD.
    if (eo.extra_fields.size() + 11 > detail::kMaxFields) {
      throw ConfigError("too many extra fields: " + std::to_string(eo.extra_fields.size()) + " (at most " +
                        std::to_string(detail::kMaxFields - 11) + ")");
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
      p.retention = retention_field(*r);
    }
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
    return p;
  }

  /// XADD <stream> MAXLEN ~ <max_len> * fields... (the seed's command).
  detail::Argv trim_argv(const Prepared& p) const {
    detail::Argv argv{"XADD", keys[static_cast<std::size_t>(p.partition)].stream, "MAXLEN", "~", max_len_text,
                      "*"};
    detail::append_new_task(argv, p.written_task());
    return argv;
  }

  /// One enqueue script call for tasks [first, last), all of one partition; `refusal_mark` (the
  /// batch's in that partition, see the enqueue script) is empty for a call that is a whole batch.
  /// `refusal_mark` (with `position`, the chunk's 1-based place among its partition's chunks):
  /// the batch's mark, for a partition sent in more than one chunk (see the enqueue script).
  detail::Argv script_argv(const std::vector<Prepared>& tasks, std::size_t first, std::size_t last,
                           const std::string& refusal_mark = {}, std::int64_t position = 0) const {
    std::size_t locks = 0;
    for (std::size_t i = first; i < last; ++i) locks += tasks[i].lock_key.empty() ? 0 : 1;
    const int numkeys = static_cast<int>(4 + locks + (refusal_mark.empty() ? 0 : 1));
    detail::Argv argv = scripts.begin(detail::ScriptId::enqueue, numkeys);
    const detail::QueueKeys& k = keys[static_cast<std::size_t>(tasks[first].partition)];
    argv.add(k.stream).add(k.high).add(k.low).add(k.delayed);
    for (std::size_t i = first; i < last; ++i) {
      if (!tasks[i].lock_key.empty()) argv.add(tasks[i].lock_key);
    }
    if (!refusal_mark.empty()) argv.add(refusal_mark);
    argv.add(options.overflow == Overflow::reject ? "reject" : "trim").add(max_len_text);
    argv.add(refusal_mark.empty() ? 0 : position).add(static_cast<std::int64_t>(last - first));
    const bool plain = std::none_of(tasks.begin() + static_cast<std::ptrdiff_t>(first),
                                    tasks.begin() + static_cast<std::ptrdiff_t>(last), needs_script);
    argv.add(plain ? "plain" : "full");
    if (plain) {
      for (std::size_t i = first; i < last; ++i) {
        const detail::NewTask written = tasks[i].written_task();  // plain: no retention; a deadline
        argv.add(static_cast<std::int64_t>(detail::new_task_string_count(written)));
        detail::append_new_task(argv, written);
      }
      return argv;
    }
    std::int64_t lock_index = 4;
    for (std::size_t i = first; i < last; ++i) {
      const Prepared& t = tasks[i];
      argv.add(t.dest).add(t.at_ms).add(t.delay_ms);
      argv.add(t.lock_key.empty() ? 0 : ++lock_index).add(t.lock_ms).add(t.nonce);
      const detail::NewTask written = t.written_task();
      argv.add(static_cast<std::int64_t>(detail::new_task_string_count(written)));
      detail::append_new_task(argv, written);
    }
    return argv;
  }

  /// Whether a task needs the enqueue script even with Overflow::trim_oldest, and the
  /// script's 'full' layout (see enqueue.lua).
  static bool needs_script(const Prepared& t) {
    return t.dest != 1 || t.at_ms > 0 || t.delay_ms > 0 || !t.lock_key.empty() || !t.retention.empty();
  }

  /// WAIT for min_replicas_acked replicas to have what this connection wrote (with a cluster
  /// URL: on every master it wrote to, at the same time); how many did, the fewest of those
  /// masters'. A server that has just turned replica refuses WAIT: none did (with a sentinel URL
  /// the connection is dropped, so the next call asks the sentinels again).
  std::int64_t replicas_acknowledging() {
    detail::Argv wait{"WAIT"};
    wait.add(static_cast<std::int64_t>(options.min_replicas_acked));
    wait.add(static_cast<std::int64_t>(options.replicas_ack_timeout.count()));
    std::int64_t fewest = options.min_replicas_acked;
    for (const detail::Reply& reply : conn.wait_where_sent(wait)) {
      if (reply.view().is_error() &&
          (conn.config().endpoint.is_sentinel() || conn.config().endpoint.is_cluster()) &&
          detail::is_demotion_error(reply.view().error())) {
        return 0;
      }
      fewest = std::min(fewest, reply.view().check().integer());
    }
    return fewest;
  }

  /// A batch some of whose commands Redis refused with `failure` (OOM, WRONGTYPE, a redirection
  /// that outlasted the retries, ...): that ReplyError, and when some tasks were written (`ids`,
  /// "" for the others) its message says which.
  [[noreturn]] void refuse_batch(const std::vector<std::string>& ids, const std::string& failure) {
    if (std::all_of(ids.begin(), ids.end(), [](const auto& id) { return id.empty(); }))
      throw ReplyError(failure);
    throw ReplyError(failure + " (enqueue_batch " + batch_outcome(ids) + replication_of_written(ids) + ")");
  }

  /// For a batch refused part-way (`ids`: the written ones, "" for the others): with
  /// min_replicas_acked, what the replicas acknowledged of the written part, for the refusal's
  /// message ("" when nothing was written, or the option is off).
  std::string replication_of_written(const std::vector<std::string>& ids) {
    if (options.min_replicas_acked == 0 ||
        std::all_of(ids.begin(), ids.end(), [](const auto& id) { return id.empty(); })) {
      return {};
    }
    const std::int64_t acked = replicas_acknowledging();
    return "; the tasks written were acknowledged by " + std::to_string(acked) + " of the " +
           std::to_string(options.min_replicas_acked) + " replicas asked for" +
           (acked < options.min_replicas_acked ? " (lost if the master fails now)" : "");
  }

  /// With min_replicas_acked: WAIT for the replicas to have what this connection wrote (the
  /// tasks `ids`, just written), and ReplicationError when too few did in time.
  void wait_for_replicas(const std::vector<std::string>& ids) {
    if (options.min_replicas_acked == 0) return;
    const std::int64_t acked = replicas_acknowledging();
    if (acked >= options.min_replicas_acked) return;
    throw ReplicationError(
        std::to_string(ids.size()) + (ids.size() == 1 ? " task (" + ids[0] + ")" : " tasks") +
            " written to the master of " + options.stream + ", but only " + std::to_string(acked) +
            " of the " + std::to_string(options.min_replicas_acked) +
            " replicas asked for acknowledged within " +
            std::to_string(options.replicas_ack_timeout.count()) +
            " ms: queued, and lost only if the master fails before a replica copies them",
        ids, acked, options.min_replicas_acked);
  }

  ProducerOptions options;
  std::vector<ProducerMiddleware> middleware;  // Producer::use

  std::string enqueue_one(std::string_view task_type, std::string_view payload_json,
                          const EnqueueOptions& task_options);
  std::vector<std::string> enqueue_many(const std::vector<TaskSpec>& tasks);
  detail::Connection conn;
  detail::ScriptRunner scripts;
  std::vector<detail::QueueKeys> keys;  // one per partition
  /// The waits' follower of the queue's events, made on the first wait.
  detail::Waiter& waiter() {
    std::lock_guard lock(waiter_mutex);
    if (!waiter_) {
      std::vector<std::string> streams;
      for (const auto& k : keys) streams.push_back(k.stream);
      waiter_ = std::make_unique<detail::Waiter>(conn.config(), std::move(streams));
    }
    return *waiter_;
  }

  /// A wait on this thread: its outcome, turned into the record or an exception here. The waiter
  /// settles it by its deadline (within its read's block) even while Redis is away; the second
  /// of slack only bounds the caller should it not.
  TaskRecord wait_here(const std::string& task_id, std::chrono::milliseconds timeout,
                       std::optional<std::size_t> partition) {
    auto promise = std::make_shared<std::promise<detail::WaitOutcome>>();
    std::future<detail::WaitOutcome> f = promise->get_future();
    waiter().wait(task_id, timeout, partition,
                  [promise](detail::WaitOutcome o) { promise->set_value(std::move(o)); });
    if (f.wait_for(timeout + std::chrono::seconds(1)) != std::future_status::ready) {
      throw WaitTimeoutError(
          "task " + task_id + " did not finish in time (its queue's events could not be read)", std::nullopt);
    }
    return f.get().take();
  }

  std::string max_len_text;
  int next_partition = 0;          // the partition of the next task without a key (the first: at random)
  std::size_t last_partition = 0;  // of the last task enqueue() wrote
  std::mutex waiter_mutex;
  std::unique_ptr<detail::Waiter> waiter_;
};

Producer::Producer(ProducerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Producer::~Producer() = default;
Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&&) noexcept = default;

const ProducerOptions& Producer::options() const noexcept { return impl_->options; }

std::future<TaskRecord> Producer::wait_async(const std::string& task_id, std::chrono::milliseconds timeout) {
  detail::check_duration(timeout, std::chrono::milliseconds(0), "timeout");
  auto promise = std::make_shared<std::promise<TaskRecord>>();
  std::future<TaskRecord> result = promise->get_future();
  impl_->waiter().wait(task_id, timeout, std::nullopt, [promise](detail::WaitOutcome o) {
    try {
      promise->set_value(std::move(o).take());
    } catch (const Error&) {
      promise->set_exception(std::current_exception());
    }
  });
  return result;
}

TaskRecord Producer::wait(const std::string& task_id, std::chrono::milliseconds timeout) {
  detail::check_duration(timeout, std::chrono::milliseconds(0), "timeout");
  return impl_->wait_here(task_id, timeout, std::nullopt);
}

TaskRecord Producer::enqueue_and_wait(std::string_view task_type, const Payload& payload,
                                      EnqueueOptions options, std::chrono::milliseconds timeout) {
  detail::check_duration(timeout, std::chrono::milliseconds(0), "timeout");
  if (!options.retention && !impl_->options.retention) {
    options.retention =
        Retention{.done = std::max<std::chrono::milliseconds>(timeout, std::chrono::minutes(1))};
  }
  const std::string id = enqueue(task_type, std::string_view(payload.text()), options);
  return impl_->wait_here(id, timeout, impl_->last_partition);
}

namespace {

/// The tracer's context into the task's fields, unless they carry a traceparent already.
void inject_trace(Tracer* tracer, EnqueueCall& call) {
  if (tracer == nullptr) return;
  for (const auto& [name, value] : call.options.extra_fields) {
    if (name == field::traceparent) return;
  }
  const std::optional<SpanContext> context = tracer->inject(call);
  if (!context || !valid_traceparent(context->traceparent)) return;
  call.options.extra_fields.emplace_back(field::traceparent, context->traceparent);
  if (!context->tracestate.empty())
    call.options.extra_fields.emplace_back(field::tracestate, context->tracestate);
}

/// Runs the middleware (and the tracer) of a producer around `last`; MiddlewareError when the
/// chain did not reach it.
void around(const std::vector<ProducerMiddleware>& chain, Tracer* tracer, EnqueueCall& call,
            const std::function<void(EnqueueCall&)>& write) {
  bool reached = false;
  detail::run_chain<MiddlewareError>(chain, 0, call, [&](EnqueueCall& c) {
    reached = true;
    inject_trace(tracer, c);
    write(c);
  });
  if (!reached) {
    throw MiddlewareError("a producer middleware returned without calling next(): task of type \"" +
                          call.task_type + "\" was not enqueued");
  }
}

}  // namespace

void Producer::use(ProducerMiddleware middleware) {
  if (!middleware) throw ConfigError("middleware must not be empty");
  impl_->middleware.push_back(std::move(middleware));
}

std::string Producer::enqueue(std::string_view task_type, std::string_view payload_json,
                              const EnqueueOptions& options) {
  Impl& im = *impl_;
  if (!im.middleware.empty() || im.options.tracer) {
    EnqueueCall call{std::string(task_type), std::string(payload_json), options, {}};
    around(im.middleware, im.options.tracer.get(), call,
           [&](EnqueueCall& c) { c.task_id = im.enqueue_one(c.task_type, c.payload, c.options); });
    return call.task_id;
  }
  return im.enqueue_one(task_type, payload_json, options);
}

std::string Producer::Impl::enqueue_one(std::string_view task_type, std::string_view payload_json,
                                        const EnqueueOptions& task_options) {
  Impl& im = *this;
  std::string id;
  const std::string created_at = detail::format_timestamp(std::chrono::system_clock::now());
  std::vector<Prepared> one{im.prepare(task_type, payload_json, task_options, id, created_at)};
  im.last_partition = static_cast<std::size_t>(one[0].partition);
  im.conn.connect_with_backoff();
  detail::Reply reply;
  if (im.options.overflow == Overflow::trim_oldest && !Impl::needs_script(one[0])) {
    reply = im.conn.command(im.trim_argv(one[0]));
  } else {
    detail::Argv argv = im.script_argv(one, 0, 1);
    reply = im.scripts.call(detail::ScriptId::enqueue, argv);
  }
  if (is_queue_full(reply)) throw QueueFullError(std::string(reply.view().error()));
  if (auto d = parse_duplicate(reply)) throw DuplicateTaskError(duplicate_message(*d), d->holder);
  reply.view().check();
  im.wait_for_replicas({id});
  return id;
}

std::vector<std::string> Producer::enqueue_batch(const std::vector<TaskSpec>& tasks) {
  Impl& im = *impl_;
  if (!im.middleware.empty() || im.options.tracer) {
    // Each task through the chain first; the batch is written once every chain returned.
    std::vector<TaskSpec> passed;
    passed.reserve(tasks.size());
    for (const TaskSpec& t : tasks) {
      EnqueueCall call{t.task_type, t.payload.text(), t.options, {}};
      around(im.middleware, im.options.tracer.get(), call, [&](EnqueueCall& c) {
        if (c.options.task_id.empty()) c.options.task_id = detail::new_uuid_v4();
        c.task_id = c.options.task_id;
        passed.push_back(TaskSpec{c.task_type, Payload(std::string(c.payload)), c.options});
      });
    }
    return im.enqueue_many(passed);
  }
  return im.enqueue_many(tasks);
}

std::vector<std::string> Producer::Impl::enqueue_many(const std::vector<TaskSpec>& tasks) {
  Impl& im = *this;
  std::vector<std::string> ids(tasks.size());
  std::vector<Prepared> prepared;
  prepared.reserve(tasks.size());
  const std::string created_at = detail::format_timestamp(std::chrono::system_clock::now());
  bool scripted = im.options.overflow == Overflow::reject;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    prepared.push_back(
        im.prepare(tasks[i].task_type, tasks[i].payload.text(), tasks[i].options, ids[i], created_at));
    scripted = scripted || Impl::needs_script(prepared.back());
  }
  if (tasks.empty()) return ids;
  std::vector<int> partition_of(prepared.size());
  for (std::size_t i = 0; i < prepared.size(); ++i) partition_of[i] = prepared[i].partition;
  im.conn.connect_with_backoff();

  if (!scripted) {
    std::vector<detail::Argv> argvs;
    argvs.reserve(prepared.size());
    for (const auto& t : prepared) argvs.push_back(im.trim_argv(t));
    std::vector<detail::Reply> replies = im.conn.pipeline(argvs);
    std::string failure;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      // A command sent where its slot no longer is: again, on its own (command() follows it).
      if (sent_to_wrong_place(replies[i])) replies[i] = im.conn.command(argvs[i]);
      if (!replies[i].view().is_error()) continue;
      if (failure.empty()) failure = std::string(replies[i].view().error());
      ids[i].clear();
    }
    if (!failure.empty()) im.refuse_batch(ids, failure);
    im.wait_for_replicas(ids);
    return ids;
  }

  // The tasks of each partition together, in batch order (with one partition, as given).
  std::vector<std::size_t> order(prepared.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (im.options.partitions > 1) {
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return partition_of[a] < partition_of[b]; });
  }
  // (With one partition the tasks stay where they are: a second copy of a large batch costs
  // its page faults, measured at a quarter of enqueue_batch's throughput.)
  std::vector<Prepared> regrouped;
  if (im.options.partitions > 1) {
    regrouped.reserve(prepared.size());
    for (const std::size_t i : order) regrouped.push_back(std::move(prepared[i]));
  }
  const std::vector<Prepared>& grouped = im.options.partitions > 1 ? regrouped : prepared;
  // Chunks of at most kChunk tasks of one partition. A partition with more than one chunk has
  // a refusal mark of its own (in its slot): once one of its chunks is refused, every chunk of
  // it behind that one writes nothing (see the enqueue script), so what was written of each
  // partition's tasks is a prefix of them.
  struct Chunk {
    std::size_t first, last;
  };
  std::vector<Chunk> chunks;
  std::vector<std::size_t> per_partition(static_cast<std::size_t>(im.options.partitions), 0);
  for (std::size_t first = 0; first < grouped.size();) {
    std::size_t last = first;
    while (last < grouped.size() && last - first < kChunk &&
           grouped[last].partition == grouped[first].partition) {
      ++last;
    }
    chunks.push_back({first, last});
    per_partition[static_cast<std::size_t>(grouped[first].partition)] += last - first;
    first = last;
  }
  const std::string token = detail::new_uuid_v4();
  std::vector<std::string> marks(per_partition.size());
  for (std::size_t p = 0; p < per_partition.size(); ++p) {
    if (per_partition[p] > kChunk) marks[p] = detail::batch_refused_key(im.keys[p].stream, token);
  }
  // Each chunk goes on the wire as soon as it is built, so Redis runs chunk k while the
  // next one is being formatted.
  std::vector<detail::Argv> argvs;
  std::vector<detail::ScriptId> script_ids;
  std::vector<std::int64_t> position(per_partition.size(), 0);
  for (const Chunk& c : chunks) {
    const auto p = static_cast<std::size_t>(grouped[c.first].partition);
    argvs.push_back(im.script_argv(grouped, c.first, c.last, marks[p], ++position[p]));
    script_ids.push_back(detail::ScriptId::enqueue);
    im.conn.append(argvs.back());
    im.conn.flush();
  }
  std::vector<detail::Reply> replies = im.scripts.collect(script_ids, argvs, false);
  // A chunk that was not run (sent where its slot no longer is: MOVED, ASK, TRYAGAIN; a
  // script cache emptied by a failover or SCRIPT FLUSH: NOSCRIPT), and the chunks of its
  // partition behind it (the enqueue script writes nothing while an earlier chunk of its batch
  // has not run), go again, on their own, in order: what is written stays a prefix in order.
  std::vector<bool> stuck(per_partition.size(), false);  // a chunk of it stays unwritten
  std::vector<bool> left(replies.size(), false);         // not run: behind an unwritten chunk
  for (std::size_t c = 0; c < replies.size(); ++c) {
    const auto p = static_cast<std::size_t>(grouped[chunks[c].first].partition);
    const bool not_run = sent_to_wrong_place(replies[c]) || detail::ScriptRunner::is_noscript(replies[c]) ||
                         (replies[c].view().is_integer() && replies[c].view().integer() == kBehindUnrun);
    if (not_run && stuck[p]) {
      left[c] = true;
      continue;
    }
    if (not_run) replies[c] = im.scripts.call(detail::ScriptId::enqueue, argvs[c]);
    const detail::ReplyView v = replies[c].view();
    if (v.is_error() || v.integer() <= 0) stuck[p] = true;
  }
  std::string server_message;
  std::string failure;  // another error reply: that chunk was not written
  std::optional<Duplicate> duplicate;
  std::size_t duplicate_index = 0;
  for (std::size_t c = 0; c < replies.size(); ++c) {
    if (left[c]) {
      for (std::size_t k = chunks[c].first; k < chunks[c].last; ++k) ids[order[k]].clear();
      continue;
    }
    const bool full = is_queue_full(replies[c]);
    auto dup = full ? std::nullopt : parse_duplicate(replies[c]);
    if ((full || dup) && server_message.empty()) {
      server_message = full ? std::string(replies[c].view().error()) : duplicate_message(*dup);
      if (dup) {
        duplicate = std::move(dup);
        duplicate_index = order[chunks[c].first + duplicate->index];
      }
    }
    if (!full && !dup && replies[c].view().is_error() && failure.empty()) {
      failure = std::string(replies[c].view().error());
    }
    if (!full && !dup && !replies[c].view().is_error() && replies[c].view().integer() > 0)
      continue;  // written
    for (std::size_t k = chunks[c].first; k < chunks[c].last; ++k) ids[order[k]].clear();
  }
  if (duplicate) {
    std::string message = partial_batch_message("duplicate task", ids, server_message) +
                          im.replication_of_written(ids);  // before the move
    throw DuplicateTaskError(message, duplicate->holder, duplicate_index, std::move(ids));
  }
  if (!server_message.empty()) {
    std::string message = partial_batch_message("queue full", ids, server_message) +
                          im.replication_of_written(ids);  // before ids is moved from
    throw QueueFullError(message, std::move(ids));
  }
  // Chunks left unwritten without an error of their own (behind one not run, whose mark then
  // expired or was evicted): the batch is refused all the same, never returned as written.
  if (failure.empty() &&
      std::any_of(ids.begin(), ids.end(), [](const std::string& id) { return id.empty(); })) {
    failure =
        "ERR a chunk of the batch was not run and the ones behind it were not written (the batch's mark "
        "expired or was evicted)";
  }
  if (!failure.empty()) im.refuse_batch(ids, failure);
  im.wait_for_replicas(ids);
  return ids;
}

}  // namespace streamq
