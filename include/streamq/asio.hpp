// SPDX-License-Identifier: MIT
// The asio component (`find_package(streamq COMPONENTS asio)`, target streamq::asio): the
// Producer's asynchronous calls with asio completion tokens, so that a coroutine suspends on
// them instead of blocking its thread, and the Consumer's coroutine handlers (on_async with an
// executor, below), many tasks in flight on a few threads:
//
//   asio::awaitable<void> handle(streamq::Producer& producer) {
//     std::string id = co_await producer.async_enqueue("resize", Resize{.width = 640}, asio::use_awaitable);
//     streamq::TaskRecord done = co_await producer.async_wait(id, std::chrono::seconds(5),
//     asio::use_awaitable);
//   }
//
// The coroutine parts (asio::use_awaitable, Consumer::on_async with an executor) need a compiler
// and standard library that give asio coroutines (asio's ASIO_HAS_CO_AWAIT: GCC 10 and later,
// clang with libc++; not clang 14 with libstdc++, where on_async with an executor stops the
// build with a message); the other completion tokens work everywhere.
//
// Standalone asio (1.22 or later, Debian's libasio-dev), with any completion token: a callback
// `void(std::exception_ptr, T)`, asio::use_awaitable, asio::use_future, asio::deferred. The
// error is the exception the blocking call would throw (co_await rethrows it). The handler runs
// on its associated executor (the coroutine's), and the operation counts as work on it until then.
//
//   consumer.on_async(io, "fetch", [](const streamq::Task& task) -> asio::awaitable<void> {
//     co_await fetch_page(task.json().at("url").get<std::string>());
//   });
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/execution/executor.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/is_executor.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/system_error.hpp>
#if defined(ASIO_HAS_CO_AWAIT)
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#endif

#include "streamq/consumer.hpp"
#include "streamq/producer.hpp"

namespace streamq::detail {

/// Carries an asio completion handler across streamq's threads: the first complete() wins and
/// posts the handler to its associated executor, whose work it holds until then.
template <class Handler, class... Args>
class AsioCompletion : public std::enable_shared_from_this<AsioCompletion<Handler, Args...>> {
 public:
  explicit AsioCompletion(Handler handler)
      : handler_(std::move(handler)), work_(asio::make_work_guard(asio::get_associated_executor(handler_))) {}

  /// Any thread; once. False when it was completed already (by a cancellation, say).
  bool complete(Args... args) {
    if (done_.exchange(true)) return false;
    auto self = this->shared_from_this();
    asio::post(work_.get_executor(), [self, values = std::make_tuple(std::move(args)...)]() mutable {
      // On the handler's executor: the slot is free again before the handler can use it.
      asio::get_associated_cancellation_slot(self->handler_).clear();
      Handler h = std::move(self->handler_);
      std::apply([&](auto&&... v) { std::move(h)(std::move(v)...); }, std::move(values));
    });
    // The work ends here, once post() has returned, not in the handler: the executor's run() could
    // otherwise return, and its io_context be destroyed, while post() still signals it.
    work_.reset();
    return true;
  }

  /// In the initiation (the caller's context): a cancellation requested through the handler's
  /// slot completes it at once with `args` (asio::error::operation_aborted and an empty value).
  void cancel_with(Args... args) {
    auto slot = asio::get_associated_cancellation_slot(handler_);
    if (!slot.is_connected()) return;
    std::weak_ptr<AsioCompletion> weak = this->shared_from_this();
    slot.assign([weak, values = std::make_tuple(std::move(args)...)](asio::cancellation_type type) {
      if (type == asio::cancellation_type::none) return;
      if (auto self = weak.lock()) std::apply([&](const auto&... v) { self->complete(v...); }, values);
    });
  }

  /// A streamq completion (copyable, as std::function wants) that completes this one.
  auto as_callback() {
    return [self = this->shared_from_this()](Args... args) { self->complete(std::move(args)...); };
  }

 private:
  Handler handler_;
  asio::executor_work_guard<asio::associated_executor_t<Handler>> work_;
  std::atomic<bool> done_{false};
};

template <class T, class Handler>
auto asio_completion(Handler&& handler) {
  return std::make_shared<AsioCompletion<std::decay_t<Handler>, std::exception_ptr, T>>(
      std::forward<Handler>(handler));
}

/// The error a cancelled wait completes with.
inline std::exception_ptr asio_aborted() {
  return std::make_exception_ptr(asio::system_error(asio::error::operation_aborted));
}

/// The executor of `e`: `e` itself, or an execution context's (an io_context's).
template <class E>
auto asio_executor_of(E& e) {
  if constexpr (asio::execution::is_executor<std::decay_t<E>>::value ||
                asio::is_executor<std::decay_t<E>>::value) {
    return e;
  } else {
    return e.get_executor();
  }
}

#if defined(ASIO_HAS_CO_AWAIT)
/// The value of an asio::awaitable<T, Executor>.
template <class A>
struct AwaitableValue {
  static_assert(sizeof(A) == 0, "streamq::Consumer::on_async: the handler must return an asio::awaitable");
};
template <class T, class E>
struct AwaitableValue<asio::awaitable<T, E>> {
  using type = T;
};

/// One coroutine task (Consumer::on_async), on a strand of its own: the asio cancellation
/// signal its task's stop emits, and the stop's callback. Used on the strand only; the signal is
/// emitted only while the coroutine runs.
template <class Strand>
struct CoroutineRun {
  explicit CoroutineRun(Strand s) : strand(std::move(s)) {}
  Strand strand;
  asio::cancellation_signal signal;
  bool finished = false;
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
};
#endif

}  // namespace streamq::detail

namespace streamq {

#if defined(ASIO_HAS_CO_AWAIT)
template <class Executor, class F>
void Consumer::on_async(Executor&& executor, std::string task_type, F handler, HandlerOptions options) {
  using Awaitable = std::invoke_result_t<F&, const Task&>;
  using Value = typename detail::AwaitableValue<Awaitable>::type;
  auto ex = detail::asio_executor_of(executor);
  using Strand = asio::strand<decltype(ex)>;
  auto run = [ex, h = std::make_shared<F>(std::move(handler))](const Task& task, AsyncDone done) {
    auto state = std::make_shared<detail::CoroutineRun<Strand>>(asio::make_strand(ex));
    Awaitable coroutine = (*h)(task);  // what this throws fails the attempt here
    // Everything else on the task's strand: the stop's callback, the spawn, the emits, the end.
    asio::post(state->strand, [state, coroutine = std::move(coroutine), done = std::move(done),
                               &task]() mutable {
      // The task's stop (timeout, deadline, cancel, the worker's stop) cancels the coroutine;
      // one requested already is emitted behind the coroutine's start, and the coroutine's next
      // co_await throws (asio's throw_if_cancelled).
      std::weak_ptr<detail::CoroutineRun<Strand>> weak = state;
      state->on_stop.emplace(task.stop_token(), std::function<void()>([weak] {
                               if (auto s = weak.lock()) {
                                 asio::post(s->strand, [s] {
                                   if (!s->finished) s->signal.emit(asio::cancellation_type::terminal);
                                 });
                               }
                             }));
      // The end: no emit after it; the task's result, when the coroutine returns one.
      auto finish = [state, done = std::move(done), &task](std::exception_ptr e, auto&&... value) {
        state->finished = true;
        state->on_stop.reset();
        if constexpr (sizeof...(value) > 0) {
          if (!e) {
            try {
              task.set_result(
                  nlohmann::json(value...).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
            } catch (...) {
              e = std::current_exception();
            }
          }
        }
        done(e);
      };
      if constexpr (std::is_void_v<Value>) {
        asio::co_spawn(state->strand, std::move(coroutine),
                       asio::bind_cancellation_slot(
                           state->signal.slot(), [finish = std::move(finish)](std::exception_ptr e) mutable {
                             finish(std::move(e));
                           }));
      } else {
        asio::co_spawn(
            state->strand, std::move(coroutine),
            asio::bind_cancellation_slot(state->signal.slot(),
                                         [finish = std::move(finish)](std::exception_ptr e, Value v) mutable {
                                           finish(std::move(e), std::move(v));
                                         }));
      }
    });
  };
  on_async(std::move(task_type), AsyncHandler(std::move(run)), std::move(options));
}
#else
template <class Executor, class F>
void Consumer::on_async(Executor&&, std::string, F, HandlerOptions) {
  static_assert(sizeof(F) == 0,
                "streamq::Consumer::on_async with an executor runs asio coroutines, which asio does not "
                "enable for this compiler and standard library (clang 14 with libstdc++): use GCC, or "
                "clang with libc++");
}
#endif

template <class CompletionToken>
auto Producer::async_enqueue(std::string_view task_type, AsyncPayload payload, const EnqueueOptions& options,
                             CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, std::string)>(
      [this](auto handler, std::string type, Payload p, EnqueueOptions o) {
        auto c = detail::asio_completion<std::string>(std::move(handler));
        this->enqueue_async(type, p, o, c->as_callback());
      },
      token, std::string(task_type), payload.payload(), options);
}

template <class CompletionToken>
auto Producer::async_enqueue(std::string_view task_type, AsyncPayload payload, CompletionToken&& token) {
  return async_enqueue(task_type, std::move(payload), EnqueueOptions{}, std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto Producer::async_enqueue_batch(std::vector<TaskSpec> tasks, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, std::vector<std::string>)>(
      [this](auto handler, std::vector<TaskSpec> t) {
        auto c = detail::asio_completion<std::vector<std::string>>(std::move(handler));
        this->enqueue_batch_async(std::move(t), c->as_callback());
      },
      token, std::move(tasks));
}

template <class CompletionToken>
auto Producer::async_enqueue_flow(FlowNode root, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, FlowIds)>(
      [this](auto handler, FlowNode r) {
        auto c = detail::asio_completion<FlowIds>(std::move(handler));
        this->enqueue_flow_async(r, c->as_callback());
      },
      token, std::move(root));
}

template <class CompletionToken>
auto Producer::async_open_batch(BatchOptions options, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, std::string)>(
      [this](auto handler, BatchOptions o) {
        auto c = detail::asio_completion<std::string>(std::move(handler));
        this->open_batch_async(o, c->as_callback());
      },
      token, std::move(options));
}

template <class CompletionToken>
auto Producer::async_close_batch(std::string batch_id, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, bool)>(
      [this](auto handler, std::string id) {
        auto c = detail::asio_completion<bool>(std::move(handler));
        this->close_batch_async(id, c->as_callback());
      },
      token, std::move(batch_id));
}

template <class CompletionToken>
auto Producer::async_wait(const std::string& task_id, std::chrono::milliseconds timeout, WaitOptions options,
                          CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, TaskRecord)>(
      [this](auto handler, std::string id, std::chrono::milliseconds t, WaitOptions o) {
        auto c = detail::asio_completion<TaskRecord>(std::move(handler));
        c->cancel_with(detail::asio_aborted(), TaskRecord{});
        this->wait_async(id, t, o, c->as_callback());
      },
      token, task_id, timeout, options);
}

template <class CompletionToken>
auto Producer::async_wait(const std::string& task_id, std::chrono::milliseconds timeout,
                          CompletionToken&& token) {
  return async_wait(task_id, timeout, WaitOptions{}, std::forward<CompletionToken>(token));
}

}  // namespace streamq
