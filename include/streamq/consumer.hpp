// SPDX-License-Identifier: MIT
// The Consumer: runs the handlers of a queue's tasks. Its options are streamq/consumer_options.hpp.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "streamq/consumer_options.hpp"
#include "streamq/errors.hpp"
#include "streamq/export.hpp"
#include "streamq/middleware.hpp"
#include "streamq/task.hpp"

namespace streamq {

/// The task's payload converted to `T` with nlohmann's from_json (`task.json().get<T>()`), as
/// Consumer::on<T> does before its handler runs.
/// @throws BadPayloadError, with the conversion error, when it does not convert.
template <class T>
T payload_as(const Task& task) {
  try {
    return task.json().template get<T>();
  } catch (const std::exception& e) {
    throw BadPayloadError("payload of task type \"" + task.type() + "\" does not convert: " + e.what());
  } catch (...) {
    throw BadPayloadError("payload of task type \"" + task.type() + "\" does not convert: unknown exception");
  }
}

/// Runs handlers for tasks of one stream, with at-least-once delivery: an entry is removed
/// only after its handler returned, or after it was moved to `<stream>:dlq`. Handlers must be
/// idempotent: a task can run more than once (a worker died after running it but before its
/// ack reached Redis, or its lease was lost).
///
/// @code
///   streamq::Consumer consumer({.stream = "task_queue", .stop_on_signals = true});
///   consumer.on("send_email", [](const streamq::Task& task) {
///     send_email(task.json().at("to").get<std::string>());
///   });
///   consumer.run();
/// @endcode
///
/// A handler that returns normally completes the task. One that throws
/// streamq::PermanentError dead-letters it at once; any other exception retries it (a copy
/// with retry_count + 1 and last_error, after the retry backoff, or after the delay of a
/// streamq::RetryAfter) while retry_count < max_retries, then dead-letters it.
///
/// Thread safety: register handlers before run(); run() once; stop() and metrics() from any
/// thread. Handlers run concurrently on `concurrency` threads. Movable (not while running).
class STREAMQ_EXPORT Consumer {
 public:
  using Handler = std::function<void(const Task&)>;

  /// Validates the options. Does not connect.
  explicit Consumer(ConsumerOptions options = {});
  /// Stops. Does not wait for handlers that outlived the shutdown grace period: they finish
  /// on their own threads (they must not use objects destroyed before they return).
  ~Consumer();
  Consumer(Consumer&&) noexcept;
  Consumer& operator=(Consumer&&) noexcept;
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  /// Registers the handler for `task_type`, with its options (retry backoff, rate limit).
  /// @throws ConfigError (empty type, duplicate, bad options, or called after run()).
  void on(std::string task_type, Handler handler, HandlerOptions options = {});

  /// Registers a typed handler: the payload is converted to `T` with nlohmann's from_json
  /// (`task.json().get<T>()`) before `handler(const T&, const Task&)` (or `handler(const T&)`)
  /// runs. A payload that does not convert is dead-lettered at once with reason `bad_payload`
  /// and the conversion error (see BadPayloadError), not retried; the handler does not run.
  /// What the handler throws is treated as in on(). Pair it with Producer::enqueue(type, T).
  /// A handler that returns a value (`R`, anything nlohmann's to_json converts) sets it as the
  /// task's result (Task::set_result of its JSON): the record of a tracked task keeps it, and
  /// Producer::wait returns it.
  /// @throws as on().
  ///
  /// @code
  ///   struct Resize {
  ///     std::string image;
  ///     int width = 0;
  ///   };
  ///   NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Resize, image, width)
  ///
  ///   producer.enqueue("resize", Resize{.image = "cat.png", .width = 640});
  ///   consumer.on<Resize>("resize", [](const Resize& r, const streamq::Task& task) {
  ///     resize(r.image, r.width, task.id());
  ///   });
  /// @endcode
  template <class T, class F>
  requires(std::invocable<F&, const T&, const Task&> ||
           std::invocable<F&, const T&>) void on(std::string task_type, F handler,
                                                 HandlerOptions options = {}) {
    on(std::move(task_type), Handler([h = std::move(handler)](const Task& task) mutable {
         const T value = streamq::payload_as<T>(task);
         const auto call = [&]() -> decltype(auto) {
           if constexpr (std::invocable<F&, const T&, const Task&>) {
             return h(value, task);
           } else {
             return h(value);
           }
         };
         if constexpr (std::is_void_v<decltype(call())>) {
           call();
         } else {
           task.set_result(
               nlohmann::json(call()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
         }
       }),
       options);
  }

  /// An untyped handler returns nothing: one that returns a value is refused at compile time,
  /// since on() would drop the value. Register it with on<T> (its return is the task's result),
  /// or call Task::set_result and return nothing.
  template <class F>
  requires(std::invocable<F&, const Task&> && !std::is_void_v<std::invoke_result_t<F&, const Task&>>) void on(
      const std::string& /*task_type*/, const F& /*handler*/, const HandlerOptions& /*options*/ = {}) {
    static_assert(sizeof(F) == 0,
                  "streamq::Consumer::on: this handler returns a value, which an untyped handler would "
                  "drop; register it with on<T>(type, handler) to make its return the task's result, or "
                  "call task.set_result(...) and return nothing");
  }

  /// How an asynchronous handler (on_async) says its task's work is over: called once, from any
  /// thread, with nullptr when it succeeded, or with what it failed with, which counts as what a
  /// handler of on() throws (PermanentError, RetryAfter, BadPayloadError, anything else: a retry).
  /// A second call is ignored (and logged). When every copy of it is destroyed without a call
  /// (a callback dropped, an io_context destroyed with the work pending), the attempt fails with
  /// "the asynchronous handler's done was destroyed without being called". It runs the attempt's
  /// end on the calling thread: a task with a concurrency limit gives its slots back in Redis
  /// there (a round trip).
  using AsyncDone = std::function<void(std::exception_ptr)>;
  /// An asynchronous handler: it starts the task's work, arranges for `done` to be called when
  /// that work is over, and returns at once. The Task stays valid until `done` is called.
  using AsyncHandler = std::function<void(const Task&, AsyncDone done)>;

  /// Registers an asynchronous handler for `task_type`: the handler thread that starts it goes
  /// on to the next task at once, so many tasks run at a time on a few threads (tasks that wait
  /// on I/O). Each such task holds its entry, its lease, its concurrency slots and its
  /// HandlerOptions::max_in_flight place until `done` is called, so ConsumerOptions::prefetch
  /// bounds how many run at once. Its timeout, deadline, an operator's cancel and the worker's
  /// stop reach it through Task::stop_token(): the handler's work must end (call `done`) when it
  /// is asked to, as a thread handler must return. A task whose `done` does not come within
  /// timeout_grace of that is given up as a thread handler is, and its late `done` is dropped.
  /// What it throws before it returns counts as a failure when it did not call `done` first
  /// (its `done` is then ignored).
  /// Middleware (use()) runs around the handler's start, not its end. Not for
  /// HandlerExecutor::process. With asio, see the coroutine form below.
  /// @throws as on(), and ConfigError for HandlerOptions::executor == process.
  void on_async(std::string task_type, AsyncHandler handler, HandlerOptions options = {});

  /// Registers a coroutine handler: `handler(const Task&)` returns an `asio::awaitable<void>`
  /// (or `asio::awaitable<R>`: R, converted with nlohmann's to_json, is the task's result), which
  /// runs on `executor` (an asio executor, or an execution context such as an io_context, which
  /// the service runs on threads of its own). The task's stop (timeout, deadline, cancel, the
  /// worker's stop) cancels the coroutine through asio's cancellation (`terminal`): the operation
  /// it waits on ends with asio::error::operation_aborted. Otherwise as on_async() above. Defined
  /// in <streamq/asio.hpp>, the asio component (`find_package(streamq COMPONENTS asio)`).
  template <class Executor, class F>
  void on_async(Executor&& executor, std::string task_type, F handler, HandlerOptions options = {});

  /// Handler for task types nobody registered; without one they are dead-lettered
  /// ("no_handler"). @throws ConfigError after run().
  void on_unknown(Handler handler);

  /// Adds a middleware around every handler call (see Middleware): the first added is the
  /// outermost. It runs inside the attempt's span when ConsumerOptions::tracer is set.
  /// @throws ConfigError (empty, or after run()).
  void use(Middleware middleware);

  /// Connects, creates the group if needed, replays this consumer's own pending entries, then
  /// reads, runs and completes tasks until stop() (or a signal, if enabled). Connection
  /// failures are retried with backoff, forever, and logged. Returns after in-flight work
  /// finished or the grace period ran out, and the completions were written; entries never
  /// started are released so another consumer takes them at once; a handler still running
  /// past the grace period keeps its entry until claim_min_idle passes, and run() returns
  /// without waiting for it.
  /// @throws ReplyError when Redis refuses the set-up (WRONGPASS, NOPERM, WRONGTYPE: the stream
  ///   key holds something else; LOADING, OOM, READONLY and other passing states are retried),
  ///   ConfigError if called twice, when a live process runs under the same consumer_name and
  ///   group, and (after stopping) when another process took this one's name while it could
  ///   not renew it for claim_min_idle.
  void run();

  /// Starts the process executor's fork server now (HandlerExecutor::process), from the calling
  /// thread, instead of at run(): a copy of the process as it is now, with the handlers
  /// registered so far. Call it at the top of main, after registering the process handlers and
  /// before the application starts threads, so no lock another thread holds is copied held into
  /// the children. A process handler registered after it is refused.
  /// @throws ConfigError (after run(), twice, or with no handler of the process executor),
  ///   Error when the fork fails.
  void start_fork_server();

  /// Asks run() to return: reading stops at once, running handlers finish. Thread-safe;
  /// callable before run() (run() then returns at once). Not async-signal-safe: from a signal
  /// handler use ConsumerOptions::stop_on_signals instead.
  void stop() noexcept;

  /// This consumer's name in the group: ConsumerOptions::consumer_name, or, when that was left
  /// empty, the name run() took at start (`<hostname>-<n>`, see consumer_name); "" until then.
  /// Thread-safe.
  std::string name() const;
  ConsumerMetrics metrics() const noexcept;

 private:
  struct STREAMQ_NO_EXPORT Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamq
