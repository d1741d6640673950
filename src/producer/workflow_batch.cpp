// SPDX-License-Identifier: MIT
// Producer::open_batch and close_batch (batches that grow while open, src/lua/batch.lua), blocking
// and asynchronous: each call built (and checked) on the caller's thread, one batch script call.
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "producer_impl.hpp"
#include "redis/scripts.hpp"
#include "streamq/errors.hpp"
#include "streamq/producer.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {

namespace {

/// The reply of the batch script, or the refusal it says.
const detail::Reply& checked_batch_reply(const detail::Reply& r) {
  if (r.view().is_error()) {
    const std::string e(r.view().error());
    if (e.starts_with("BATCHEXISTS")) throw ConfigError(e.substr(12) + ": batch ids must be unique");
    if (e.starts_with("BATCHCLOSED")) throw BatchClosedError(e);
  }
  r.view().check();
  return r;
}

}  // namespace

/// One batch script call (open or close) and what it views: built by open_call() or
/// close_call(), its reply read by the caller; it must not move in between.
struct Producer::Impl::BatchCall {
  BatchOptions options;  // open: a copy of the caller's (the command views its strings)
  std::string batch_id;
  std::string ids[2];                       // the callbacks' task ids
  std::string created_at;                   // viewed by the callbacks
  std::vector<detail::Prepared> callbacks;  // viewed by the command: reserved, never moved
  detail::Argv argv;
};

std::unique_ptr<Producer::Impl::BatchCall> Producer::Impl::open_call(const BatchOptions& requested) {
  auto c = std::make_unique<BatchCall>();
  const BatchOptions& batch = c->options = requested;
  c->batch_id = batch.batch_id.empty() ? detail::new_uuid_v4() : batch.batch_id;
  const std::string& id = c->batch_id;
  if (!batch.parent_batch.empty() && options.partitions > 1) {
    throw ConfigError("nested batches (parent_batch) need a queue of one partition");
  }
  const int partition = partition_of(EnqueueOptions{.batch = id}, {});
  const detail::QueueKeys& k = keys[static_cast<std::size_t>(partition)];
  const std::string& created_at = c->created_at = detail::format_timestamp(std::chrono::system_clock::now());
  c->callbacks.reserve(2);
  detail::Argv& argv = c->argv = detail::ScriptRunner::begin_shared(detail::ScriptId::batch, 1);
  argv.add(k.stream).add("open").add(id).add(batch.parent_batch);
  const std::optional<TaskSpec>* given[] = {&batch.on_complete, &batch.on_success};
  for (std::size_t i = 0; i < 2; ++i) {
    if (!*given[i]) {
      argv.add(std::int64_t{0});
      continue;
    }
    const TaskSpec& t = **given[i];
    const EnqueueOptions& eo = t.options;
    refuse_debounce(eo, "open_batch (a batch's callback)");
    if (eo.delay.count() > 0 || eo.run_at || eo.unique_for.count() > 0 || !eo.batch.empty()) {
      throw ConfigError("a batch's callback (task type \"" + t.task_type +
                        "\") is enqueued when the batch ends: no delay, run_at, unique_for or batch");
    }
    if (options.partitions > 1 && !eo.tenant.empty()) {
      // (It is enqueued in the batch's partition, where its tenant's keys may not be.)
      throw ConfigError("in a partitioned queue a batch's callback (task type \"" + t.task_type +
                        "\") may not name a tenant");
    }
    detail::Prepared& p =
        c->callbacks.emplace_back(prepare(t.task_type, t.payload.text(), eo, c->ids[i], created_at));
    p.task.batch_id = id;
    const std::string& stream = p.dest == 2 ? k.high : p.dest == 3 ? k.low : k.stream;
    const detail::NewTask written = p.written_task();
    argv.add(static_cast<std::int64_t>(1 + detail::new_task_string_count(written))).add(stream);
    detail::append_new_task(argv, written);
  }
  return c;
}

std::unique_ptr<Producer::Impl::BatchCall> Producer::Impl::close_call(const std::string& batch_id) {
  if (batch_id.empty()) throw ConfigError("batch_id must not be empty");
  auto c = std::make_unique<BatchCall>();
  c->batch_id = batch_id;
  const int partition = partition_of(EnqueueOptions{.batch = batch_id}, {});
  c->argv = detail::ScriptRunner::begin_shared(detail::ScriptId::batch, 1);
  c->argv.add(keys[static_cast<std::size_t>(partition)].stream).add("close").add(c->batch_id);
  return c;
}

template <class T>
void Producer::Impl::batch_call_async(const std::function<std::unique_ptr<BatchCall>()>& build,
                                      std::function<T(const BatchCall&, const detail::Reply&)> answer,
                                      std::function<void(std::exception_ptr, T)> done) {
  std::shared_ptr<BatchCall> c;
  try {
    if (!done) throw ConfigError("the completion must not be empty");
    c = build();
  } catch (...) {
    if (!done) throw;
    link.post([done](const detail::SharedOutcome& o) { done(o.error, T{}); }, {{}, std::current_exception()});
    return;
  }
  link.submit({{&c->argv, detail::ScriptId::batch}}, true,
              [c, answer = std::move(answer), done = std::move(done)](detail::SharedOutcome o) {
                T value{};
                try {
                  if (o.error) std::rethrow_exception(o.error);
                  value = answer(*c, checked_batch_reply(o.replies[0]));
                } catch (...) {
                  return done(std::current_exception(), T{});
                }
                done(nullptr, std::move(value));
              });
}

std::string Producer::Impl::opened(const BatchCall& c, const detail::Reply&) { return c.batch_id; }

bool Producer::Impl::closed_now(const BatchCall&, const detail::Reply& r) { return r.view().integer() == 1; }

std::string Producer::open_batch(const BatchOptions& options) {
  Impl& im = *impl_;
  const std::unique_ptr<Impl::BatchCall> c = im.open_call(options);
  return Impl::opened(*c, checked_batch_reply(im.link.run({{&c->argv, detail::ScriptId::batch}}, true)[0]));
}

bool Producer::close_batch(const std::string& batch_id) {
  Impl& im = *impl_;
  const std::unique_ptr<Impl::BatchCall> c = im.close_call(batch_id);
  return Impl::closed_now(*c,
                          checked_batch_reply(im.link.run({{&c->argv, detail::ScriptId::batch}}, true)[0]));
}

void Producer::open_batch_async(const BatchOptions& options, EnqueueHandler done) {
  Impl& im = *impl_;
  im.batch_call_async<std::string>([&im, options] { return im.open_call(options); }, Impl::opened,
                                   std::move(done));
}

std::future<std::string> Producer::open_batch_async(const BatchOptions& options) {
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> f = promise->get_future();
  open_batch_async(options, detail::settling(std::move(promise)));
  return f;
}

void Producer::close_batch_async(const std::string& batch_id, CloseBatchHandler done) {
  Impl& im = *impl_;
  im.batch_call_async<bool>([&im, batch_id] { return im.close_call(batch_id); }, Impl::closed_now,
                            std::move(done));
}

std::future<bool> Producer::close_batch_async(const std::string& batch_id) {
  auto promise = std::make_shared<std::promise<bool>>();
  std::future<bool> f = promise->get_future();
  close_batch_async(batch_id, detail::settling(std::move(promise)));
  return f;
}

}  // namespace streamq
