// SPDX-License-Identifier: MIT
// Producer: its options' checks, its public calls (through the middleware and the tracer), one
// task's write, and the waits. Batches are written in batch.cpp, a task is prepared in prepare.cpp.
#include "streamq/producer.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <random>

#include "producer_impl.hpp"
#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "refusals.hpp"
#include "streamq/errors.hpp"
#include "streamq/tracing.hpp"
#include "util/durations.hpp"
#include "util/middleware_chain.hpp"
#include "waiter.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {

using detail::duplicate_message;
using detail::is_queue_full;
using detail::parse_duplicate;
using detail::Prepared;

namespace {

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

}  // namespace

Producer::Impl::Impl(ProducerOptions o)
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

std::string Producer::Impl::first_partition(const ProducerOptions& o) {
  return detail::partition_stream(o.stream, o.partitions, 0);
}

detail::Waiter& Producer::Impl::waiter() {
  std::lock_guard lock(waiter_mutex);
  if (!waiter_) {
    std::vector<std::string> streams;
    for (const auto& k : keys) streams.push_back(k.stream);
    waiter_ = std::make_unique<detail::Waiter>(conn.config(), std::move(streams));
  }
  return *waiter_;
}

TaskRecord Producer::Impl::wait_here(const std::string& task_id, std::chrono::milliseconds timeout,
                                     std::optional<std::size_t> partition, const WaitOptions& options) {
  auto promise = std::make_shared<std::promise<detail::WaitOutcome>>();
  std::future<detail::WaitOutcome> f = promise->get_future();
  // The waiter answers every wait by its deadline, whatever Redis does.
  waiter().wait(task_id, timeout, partition, options.wait_for_enqueue,
                [promise](detail::WaitOutcome o) { promise->set_value(std::move(o)); });
  return f.get().take();
}

Producer::Producer(ProducerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Producer::~Producer() = default;
Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&&) noexcept = default;

const ProducerOptions& Producer::options() const noexcept { return impl_->options; }

std::future<TaskRecord> Producer::wait_async(const std::string& task_id, std::chrono::milliseconds timeout) {
  return wait_async(task_id, timeout, WaitOptions{});
}

std::future<TaskRecord> Producer::wait_async(const std::string& task_id, std::chrono::milliseconds timeout,
                                             WaitOptions options) {
  detail::check_duration(timeout, std::chrono::milliseconds(0), "timeout");
  auto promise = std::make_shared<std::promise<TaskRecord>>();
  std::future<TaskRecord> result = promise->get_future();
  impl_->waiter().wait(task_id, timeout, std::nullopt, options.wait_for_enqueue,
                       [promise](detail::WaitOutcome o) {
                         try {
                           promise->set_value(std::move(o).take());
                         } catch (const Error&) {
                           promise->set_exception(std::current_exception());
                         }
                       });
  return result;
}

TaskRecord Producer::wait(const std::string& task_id, std::chrono::milliseconds timeout) {
  return wait(task_id, timeout, WaitOptions{});
}

TaskRecord Producer::wait(const std::string& task_id, std::chrono::milliseconds timeout,
                          WaitOptions options) {
  detail::check_duration(timeout, std::chrono::milliseconds(0), "timeout");
  return impl_->wait_here(task_id, timeout, std::nullopt, options);
}

TaskRecord Producer::enqueue_and_wait(std::string_view task_type, const Payload& payload,
                                      EnqueueOptions options, std::chrono::milliseconds timeout) {
  detail::check_duration(timeout, std::chrono::milliseconds(0), "timeout");
  if (!options.retention && !impl_->options.retention) {
    options.retention =
        Retention{.done = std::max<std::chrono::milliseconds>(timeout, std::chrono::minutes(1))};
  }
  // A record that goes with the task's end could go before this wait reads it (a quick task):
  // kept for the minute a record someone waits on is kept (src/lua/watch.lua).
  Retention& kept =
      options.retention ? *options.retention : options.retention.emplace(*impl_->options.retention);
  if (kept.done.count() == 0) kept.done = std::chrono::minutes(1);
  if (kept.dead && kept.dead->count() == 0) kept.dead = std::chrono::minutes(1);
  const std::string id = enqueue(task_type, std::string_view(payload.text()), options);
  return impl_->wait_here(id, timeout, impl_->last_partition, WaitOptions{});
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

}  // namespace streamq
