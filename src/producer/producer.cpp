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
      middleware(std::make_shared<const std::vector<ProducerMiddleware>>()),
      link(detail::make_connection_config(options.connection, "producer", first_partition(options))),
      max_len_text(std::to_string(options.max_len)) {
  for (int i = 0; i < options.partitions; ++i) {
    keys.push_back(detail::queue_keys(detail::partition_stream(options.stream, options.partitions, i)));
  }
  // Producers that live for a few tasks (a request handler's, `streamq enqueue`) spread them too.
  if (options.partitions > 1) {
    next_partition =
        static_cast<unsigned>(std::random_device{}() % static_cast<unsigned>(options.partitions));
  }
  if (options.overflow == Overflow::reject) {
    for (std::size_t p = 0; p < keys.size(); ++p) {
      merges.push_back(std::make_unique<detail::MergedEnqueue>(
          [this](const std::vector<const detail::Prepared*>& t) { return merged_argv(t); }));
    }
  }
}

Producer::Impl::~Impl() { link.close(); }

std::shared_ptr<const std::vector<ProducerMiddleware>> Producer::Impl::middleware_now() {
  std::lock_guard lock(middleware_mutex);
  return middleware;
}

std::string Producer::Impl::first_partition(const ProducerOptions& o) {
  return detail::partition_stream(o.stream, o.partitions, 0);
}

detail::Waiter& Producer::Impl::waiter() {
  std::lock_guard lock(waiter_mutex);
  if (!waiter_) {
    std::vector<std::string> streams;
    for (const auto& k : keys) streams.push_back(k.stream);
    waiter_ = std::make_unique<detail::Waiter>(link.config(), std::move(streams));
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
  std::size_t partition = 0;
  const std::string id = impl_->enqueue_through_middleware(task_type, payload.text(), options, &partition);
  return impl_->wait_here(id, timeout, partition, WaitOptions{});
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
  Impl& im = *impl_;
  std::lock_guard lock(im.middleware_mutex);
  auto more = std::make_shared<std::vector<ProducerMiddleware>>(*im.middleware);
  more->push_back(std::move(middleware));
  im.middleware = std::move(more);
  im.has_middleware = true;
}

std::string Producer::enqueue(std::string_view task_type, std::string_view payload_json,
                              const EnqueueOptions& options) {
  return impl_->enqueue_through_middleware(task_type, payload_json, options, nullptr);
}

std::string Producer::Impl::enqueue_through_middleware(std::string_view task_type,
                                                       std::string_view payload_json,
                                                       const EnqueueOptions& task_options,
                                                       std::size_t* partition) {
  if (has_middleware.load() || options.tracer) {
    EnqueueCall call{std::string(task_type), std::string(payload_json), task_options, {}};
    around(*middleware_now(), options.tracer.get(), call,
           [&](EnqueueCall& c) { c.task_id = enqueue_one(c.task_type, c.payload, c.options, partition); });
    return call.task_id;
  }
  return enqueue_one(task_type, payload_json, task_options, partition);
}

void Producer::Impl::build_one(OneWrite& w) {
  w.created_at = detail::format_timestamp(std::chrono::system_clock::now());
  w.one.push_back(prepare(w.type, w.payload, w.options, w.id, w.created_at));
  const bool plain = !Impl::needs_script(w.one[0]);
  if (options.overflow == Overflow::trim_oldest && plain) {
    w.argv = trim_argv(w.one[0]);
  } else if (plain) {
    w.merged = true;  // (Overflow::reject: merges has its partition's)
  } else {
    w.argv = script_argv(w.one, 0, 1);
    w.script = detail::ScriptId::enqueue;
  }
}

std::string Producer::Impl::finish_one(const OneWrite& w, const detail::Reply& reply) {
  if (is_queue_full(reply)) throw QueueFullError(std::string(reply.view().error()));
  if (detail::is_batch_closed(reply)) throw BatchClosedError(std::string(reply.view().error()));
  if (auto d = parse_duplicate(reply)) throw DuplicateTaskError(duplicate_message(*d), d->holder);
  if (detail::is_debounce_type(reply)) throw ConfigError(std::string(reply.view().error()));
  const detail::ReplyView v = reply.view().check();
  // A debounced call's reply is the id of the task that will run: this call's, or the one it
  // was absorbed into.
  if (!w.one[0].debounce_key.empty()) return std::string(v.str());
  return w.id;
}

std::string Producer::Impl::finish_merged(const OneWrite& w, const detail::SharedOutcome& o) {
  if (o.error) std::rethrow_exception(o.error);
  return w.id;
}

std::string Producer::Impl::enqueue_one(std::string_view task_type, std::string_view payload_json,
                                        const EnqueueOptions& task_options, std::size_t* partition) {
  OneWrite w{.type = std::string(task_type), .payload = std::string(payload_json), .options = task_options};
  build_one(w);
  if (partition != nullptr) *partition = static_cast<std::size_t>(w.one[0].partition);
  const auto p = static_cast<std::size_t>(w.one[0].partition);
  std::uint64_t written_on = 0;
  std::string id;
  if (w.merged) {
    const detail::SharedOutcome o = link.run_merged(*merges[p], &w.one[0]);
    written_on = o.generation;
    id = finish_merged(w, o);
  } else {
    id = finish_one(w, link.run({{&w.argv, w.script}}, true, &written_on)[0]);
  }
  wait_for_replicas({id}, written_on, {keys[p].stream});
  return id;
}

std::vector<TaskSpec> Producer::Impl::through_middleware(const std::vector<TaskSpec>& tasks) {
  // Each task through the chain first; the batch is written once every chain returned.
  const auto chain = middleware_now();
  std::vector<TaskSpec> passed;
  passed.reserve(tasks.size());
  for (const TaskSpec& t : tasks) {
    EnqueueCall call{t.task_type, t.payload.text(), t.options, {}};
    around(*chain, options.tracer.get(), call, [&](EnqueueCall& c) {
      if (c.options.task_id.empty()) c.options.task_id = detail::new_uuid_v4();
      c.task_id = c.options.task_id;
      passed.push_back(TaskSpec{c.task_type, Payload(std::string(c.payload)), c.options});
    });
  }
  return passed;
}

std::vector<std::string> Producer::enqueue_batch(const std::vector<TaskSpec>& tasks) {
  Impl& im = *impl_;
  if (im.has_middleware.load() || im.options.tracer) return im.enqueue_many(im.through_middleware(tasks));
  return im.enqueue_many(tasks);
}

}  // namespace streamq

// The asynchronous calls: built (and checked) on the caller's thread, answered on the completion
// thread.
namespace streamq {

using detail::settling;

void Producer::enqueue_async(std::string_view task_type, const Payload& payload,
                             const EnqueueOptions& options, EnqueueHandler done) {
  Impl& im = *impl_;
  auto w = std::make_shared<Impl::OneWrite>();
  try {
    if (!done) throw ConfigError("enqueue_async: the completion must not be empty");
    auto build = [&](const EnqueueCall& c) {
      w->type = c.task_type;
      w->payload = c.payload;
      w->options = c.options;
      im.build_one(*w);
    };
    EnqueueCall call{std::string(task_type), payload.text(), options, {}};
    if (im.has_middleware.load() || im.options.tracer) {
      around(*im.middleware_now(), im.options.tracer.get(), call, [&](EnqueueCall& c) {
        build(c);
        c.task_id = w->id;
      });
    } else {
      build(call);
    }
  } catch (...) {
    if (!done) throw;
    im.link.post([done](const detail::SharedOutcome& o) { done(o.error, {}); },
                 {{}, std::current_exception()});
    return;
  }
  auto answered = [&im, w, done = std::move(done)](detail::SharedOutcome o) {
    std::exception_ptr error;
    std::string id;
    try {
      if (w->merged) {
        id = im.finish_merged(*w, o);
      } else {
        if (o.error) std::rethrow_exception(o.error);
        id = im.finish_one(*w, o.replies[0]);
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (error || im.options.min_replicas_acked == 0) return done(error, std::move(id));
    im.replicas_then({id}, o.generation, im.keys[static_cast<std::size_t>(w->one[0].partition)].stream,
                     [done, id](const std::exception_ptr& e) { done(e, e ? std::string() : id); });
  };
  if (w->merged) {
    im.link.submit_merged(*im.merges[static_cast<std::size_t>(w->one[0].partition)], &w->one[0],
                          std::move(answered));
  } else {
    im.link.submit({{&w->argv, w->script}}, true, std::move(answered));
  }
}

std::future<std::string> Producer::enqueue_async(std::string_view task_type, const Payload& payload,
                                                 const EnqueueOptions& options) {
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> f = promise->get_future();
  enqueue_async(task_type, payload, options, settling(std::move(promise)));
  return f;
}

void Producer::enqueue_batch_async(std::vector<TaskSpec> tasks, BatchHandler done) {
  Impl& im = *impl_;
  auto b = std::make_shared<Impl::BatchWrite>();
  try {
    if (!done) throw ConfigError("enqueue_batch_async: the completion must not be empty");
    b->owned =
        im.has_middleware.load() || im.options.tracer ? im.through_middleware(tasks) : std::move(tasks);
    im.build_batch(*b, b->owned);
  } catch (...) {
    if (!done) throw;
    im.link.post([done](const detail::SharedOutcome& o) { done(o.error, {}); },
                 {{}, std::current_exception()});
    return;
  }
  if (b->owned.empty()) {
    im.link.post([done](const detail::SharedOutcome&) { done(nullptr, {}); }, {});
    return;
  }
  im.link.submit(b->commands(), !b->scripted, [&im, b, done = std::move(done)](detail::SharedOutcome o) {
    if (o.error) return done(o.error, {});
    std::vector<std::string> ids;
    b->generation = o.generation;
    try {
      ids = im.finish_batch(*b, std::move(o.replies));
    } catch (...) {
      return done(std::current_exception(), {});
    }
    done(nullptr, std::move(ids));
  });
}

std::future<std::vector<std::string>> Producer::enqueue_batch_async(std::vector<TaskSpec> tasks) {
  auto promise = std::make_shared<std::promise<std::vector<std::string>>>();
  std::future<std::vector<std::string>> f = promise->get_future();
  enqueue_batch_async(std::move(tasks), settling(std::move(promise)));
  return f;
}

void Producer::wait_async(const std::string& task_id, std::chrono::milliseconds timeout, WaitOptions options,
                          WaitHandler done) {
  if (!done) throw ConfigError("wait_async: the completion must not be empty");
  try {
    detail::check_duration(timeout, std::chrono::milliseconds(0), "timeout");
  } catch (...) {
    impl_->link.post([done](const detail::SharedOutcome& o) { done(o.error, {}); },
                     {{}, std::current_exception()});
    return;
  }
  impl_->waiter().wait(task_id, timeout, std::nullopt, options.wait_for_enqueue,
                       [done = std::move(done)](detail::WaitOutcome o) {
                         TaskRecord record;
                         std::exception_ptr error;
                         try {
                           record = std::move(o).take();
                         } catch (...) {
                           error = std::current_exception();
                         }
                         done(error, std::move(record));
                       });
}

}  // namespace streamq
