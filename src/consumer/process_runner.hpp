// SPDX-License-Identifier: MIT
// The process executor (HandlerExecutor::process), the worker's side of one attempt: hands the
// task to a child of the pool, answers its report writes, keeps its dead man's switch renewed
// with the task's leases, stops it when the task is asked to stop, and turns what it reports
// (or how it died) into what the handler would have thrown.
#pragma once

#include <chrono>

#include "process_pool.hpp"
#include "streamq/task.hpp"
#include "task_control.hpp"

namespace streamq::detail {

/// Runs `task` in a child of `pool` and returns when its handler is done there. Throws here what
/// the handler threw in the child, as the same kind (RetryAfter, PermanentError,
/// BadPayloadError; anything else as a streamq::Error with its message); a child that died
/// without a word (a signal, a limit, an exit) is a failure naming how it died, and one killed by
/// its dead man's switch is also asked to stop for lease_lost. Once `control` is asked to stop for
/// a timeout, a deadline, a cancel or a lost lease, the child's group gets SIGTERM, and SIGKILL
/// `grace` / 2 later if it is still there. The child's dead man's switch follows
/// `control.entry_lease_until` (set before the call from the entry's last renewal, moved on by
/// the watchdog's sweeps) and `control.slot_lease_until`. @throws Error when no child can be had.
void run_in_child(ProcessPool& pool, const Task& task, TaskControl& control, std::chrono::milliseconds grace);

}  // namespace streamq::detail
