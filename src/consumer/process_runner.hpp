// SPDX-License-Identifier: MIT
// The process executor (HandlerExecutor::process): one attempt of a handler in a child process
// forked by its handler thread, which waits for the child, stops it when the task is asked to
// stop, and turns what the child reports (or how it died) into what the handler would have
// thrown.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "executor.hpp"
#include "streamq/consumer_options.hpp"
#include "task_control.hpp"

namespace streamq::detail {

/// Runs `handler` in a child process and returns when the child is gone; `task` is the task it
/// runs (its result, set in the child, is set here too). Throws here what the handler threw in
/// the child, as the same kind (RetryAfter, PermanentError, BadPayloadError; anything else as a
/// streamq::Error with its message); a child that died without a word (a signal, a limit, an
/// exit) is a failure naming how it died. Once `control` is asked to stop for a timeout, a
/// deadline or a cancel, the child gets SIGTERM, and SIGKILL `grace` / 2 later if it is still
/// there. `channel` is the handler thread's: the child leaves it alone (it is the worker's) and
/// opens its own for progress reports. @throws Error when the fork itself fails.
void run_in_child(const Task& task, const std::function<void()>& handler, const ProcessLimits& limits,
                  TaskControl& control, std::chrono::milliseconds grace, std::unique_ptr<Channel>& channel);

}  // namespace streamq::detail
