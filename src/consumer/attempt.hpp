// SPDX-License-Identifier: MIT
// The steps of one attempt that execute() (executor.cpp) takes: its start (attempt_start.cpp),
// its limits (attempt_limits.cpp), its span (attempt_trace.cpp) and its fate (conclude.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "executor.hpp"
#include "retry_policy.hpp"
#include "shared.hpp"
#include "streamq/consumer_options.hpp"
#include "streamq/task.hpp"
#include "streamq/tracing.hpp"
#include "task_control.hpp"

namespace streamq::detail {

// --- The start of an attempt (attempt_start.cpp)

/// What the start script said of a suspect: run it, another consumer took it, its body is gone.
enum class Start { run, not_ours, gone };

/// Counts the attempt before a suspect runs (owner-checked XCLAIM RETRYCOUNT), so the poison
/// check sees how often it was started, not how often it was merely prefetched by workers
/// that died.
Start start_suspect(const Shared& s, Work& w, std::unique_ptr<Channel>& ch);

/// What the tracking scripts need of a task's fields: its id, type and retention (if tracked),
/// a flow's child's parent and failure policy, and a batch's task's batch.
Fields tracking_fields(const Task& task);

/// The deadline of a task (EnqueueOptions::deadline), if it has a readable one.
std::optional<std::chrono::system_clock::time_point> deadline_of(const Task& task);

// --- Rate limits, put-backs and concurrency slots (attempt_limits.cpp)

/// The entry back into the delayed set, unrun and uncounted, due in `delay`.
Completion put_back(const Work& w, Millis delay);

/// A started task handed back unfinished and uncounted, its fields as they were: into its
/// stream at once (`delay` 0: the worker stopped while it ran) or into the delayed set (its
/// holder lost a concurrency slot's lease).
Completion hand_back(const Work& w, Millis delay);

/// How long a start of `type` must wait for its rate limit (0: it may start now, and is
/// counted). One script: the sliding window's check and the count of this start together, so
/// the workers of a group never exceed the limit in any window. Throws what Redis throws.
Millis rate_wait(const Shared& s, std::string_view type, const RateLimit& rate, std::unique_ptr<Channel>& ch);

/// A start waiting for a concurrency slot waits this long in the delayed set: 100 to 500 ms.
Millis slot_wait();

/// Takes the concurrency slots of one start (slot.lua), in order: the queue's, then its type's.
/// On a refusal gives back the ones taken. True when every one was taken. Throws what Redis
/// throws (after giving back what it took, as far as it can).
bool take_slots(const Shared& s, TaskControl& c, const std::vector<int>& limits,
                std::unique_ptr<Channel>& ch);

/// Gives back the first `count` slots of `c`. A failure is logged: the slot frees itself after
/// claim_min_idle.
void release_slots(const Shared& s, const TaskControl& c, std::size_t count, std::unique_ptr<Channel>& ch);

/// Counts a start against HandlerOptions::max_in_flight; false (nothing counted) when full.
bool enter_local_limit(std::atomic<int>* running, int max);

// --- Tracing (attempt_trace.cpp)

/// A retry of an attempt with a span names that span (field retry_of_span): the next attempt
/// links to it.
void note_span(Completion& c, const Span* span);

/// The trace context a task carries in `name` (and `state_name`), if valid.
std::optional<SpanContext> carried(const Task& task, std::string_view name, std::string_view state_name);

// --- The fate of an attempt (conclude.cpp; give_up() is declared in watchdog.hpp)

/// The completion that dead-letters `key` for `why` (logged as a warning).
Completion dead_letter(const Shared& s, const EntryKey& key, std::shared_ptr<const Fields> fields,
                       std::string_view why, std::string error);

/// The fate of an attempt that ended, however it ended: `attempt` and `error` say how the
/// handler came back (or that it did not), `why` whether it had been asked to stop for a
/// timeout, a deadline or a cancel, which then decides.
Completion conclude(Shared& s, const Work& w, const Task& task, const HandlerOptions* options,
                    Attempt attempt, std::string error, std::optional<Millis> retry_after, StopWhy why,
                    std::optional<std::string> result, bool tracked);

/// "done", "retry", "dead" or "cancelled": what a span's end says of `c`.
std::string_view outcome_name(const Completion& c);

}  // namespace streamq::detail
