// SPDX-License-Identifier: MIT
// Middleware around a handler (Consumer::use) and around an enqueue (Producer::use, whose
// EnqueueCall is in producer.hpp).
#pragma once

#include <functional>

#include "streamq/export.hpp"
#include "streamq/task.hpp"

namespace streamq {

/// The rest of a middleware chain: the next middleware, or at the end the handler (Consumer)
/// or the write (Producer). Call it at most once: a second call throws (PermanentError in a
/// consumer, which dead-letters the task; MiddlewareError in a producer). Not calling it skips
/// the rest: the handler does not run (the attempt ends as the middleware ends: returning
/// completes the task, throwing fails it), or nothing is enqueued (Producer::enqueue then
/// throws MiddlewareError).
class STREAMQ_EXPORT Next {
 public:
  using Call = void (*)(const void* context);
  Next(Call call, const void* context) noexcept : call_(call), context_(context) {}
  void operator()() const { call_(context_); }

 private:
  Call call_;
  const void* context_;
};

/// Runs around each handler call of a Consumer, in the order added: the first added is the
/// outermost. It sees the task (its fields, Task::stop_token, set_progress...) and calls
/// next() to run the rest. What it throws is the attempt's failure as if the handler threw it
/// (PermanentError dead-letters, RetryAfter retries later, anything else retries); it may catch
/// what the handler throws and map it (e.g. a 4xx of a client library to PermanentError). Runs
/// on the handler's thread.
using Middleware = std::function<void(const Task& task, const Next& next)>;

}  // namespace streamq
