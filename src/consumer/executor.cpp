// SPDX-License-Identifier: MIT
#include "executor.hpp"

#include <charconv>
#include <chrono>
#include <optional>
#include <variant>

#include "lease_keeper.hpp"
#include "log.hpp"
#include "process_runner.hpp"
#include "redis/scripts.hpp"
#include "retry_policy.hpp"
#include "streamq/errors.hpp"
#include "task_control.hpp"
#include "task_reports.hpp"
#include "util/middleware_chain.hpp"
#include "watchdog.hpp"
#include "wire/codec.hpp"
#include "wire/fate_args.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {
namespace {

Completion dead_letter(const Shared& s, const EntryKey& key, std::shared_ptr<const Fields> fields,
                       std::string_view why, std::string error) {
  if (log_enabled(LogLevel::warning)) {
    log(LogLevel::warning, "dead-lettering entry " + key.id + " of " + s.keys(key.stream).stream + " (" +
                               std::string(why) + "): " + error);
  }
  return Completion{key,
                    Outcome::dead_letter,
                    {},
                    std::move(fields),
                    why,
                    std::move(error),
                    format_timestamp(std::chrono::system_clock::now())};
}

enum class Start { run, not_ours, gone };

/// Counts the attempt before a suspect runs (owner-checked XCLAIM RETRYCOUNT), so the poison
/// check sees how often it was started, not how often it was merely prefetched by workers
/// that died.
Start start_suspect(const Shared& s, Work& w, std::unique_ptr<Channel>& ch) {
  try {
    if (!ch) ch = std::make_unique<Channel>(s.connection);
    Argv argv = ch->scripts.begin(ScriptId::start, 1);
    argv.add(s.keys(w.key.stream).stream).add(s.opt.group).add(s.opt.consumer_name).add(w.key.id);
    argv.add(w.deliveries + 1);
    const Reply r = ch->scripts.call(ScriptId::start, argv);
    const std::int64_t result = r.view().check().integer();
    if (result == start_not_owner) {
      log(LogLevel::warning, "entry " + w.key.id + " was taken by another consumer before it started");
      return Start::not_ours;
    }
    if (result == start_body_gone) return Start::gone;
  } catch (const std::exception& e) {
    // Running it anyway keeps at-least-once; only this attempt goes uncounted.
    log(LogLevel::warning, "could not count the start of entry " + w.key.id + ": " + e.what());
  }
  w.deliveries += 1;
  return Start::run;
}

void thread_main(Shared& s) {
  std::unique_ptr<Channel> channel;
  std::optional<Work> w = s.inflight.take();
  while (w) {
    const bool suspect = w->suspect();
    try {
      if (suspect) {
        const std::int64_t counted_from = w->deliveries;
        const Start start = start_suspect(s, *w, channel);
        if (start == Start::gone) report_gone(s, w->key.stream, {w->key.id});
        const StartVerdict verdict =
            start == Start::run ? s.inflight.started(w->key, counted_from) : StartVerdict::skip;
        if (verdict != StartVerdict::run) {
          if (verdict == StartVerdict::skip) s.inflight.not_run(w->key, suspect);
          w = s.inflight.take();
          continue;
        }
      }
      std::optional<Completion> done = execute(s, *w, channel);
      w = s.inflight.finish_and_take(std::move(done), suspect);
    } catch (const std::exception& e) {
      // Our own failure (memory): the entry stays pending and is reclaimed after claim_min_idle.
      log(LogLevel::error, "entry " + w->key.id + " could not be run: " + e.what());
      s.inflight.not_run(w->key, suspect);
      w = s.inflight.take();
    }
  }
}

/// The entry back into the delayed set, unrun and uncounted, due in `delay`.
Completion put_back(const Work& w, Millis delay) {
  Completion c{w.key, Outcome::retry, *w.fields};
  c.delay = std::max(delay, Millis(1));
  c.attempted = false;
  return c;
}

/// How long a start of `type` must wait for its rate limit (0: it may start now, and is
/// counted). One script: the sliding window's check and the count of this start together, so
/// the workers of a group never exceed the limit in any window. Throws what Redis throws.
Millis rate_wait(const Shared& s, std::string_view type, const RateLimit& rate,
                 std::unique_ptr<Channel>& ch) {
  if (!ch) ch = std::make_unique<Channel>(s.connection);
  const std::string key = rate_key(s.queue, type);  // one window for every partition
  Argv argv = ch->scripts.begin(ScriptId::rate, 1);
  argv.add(key).add(rate.limit).add(static_cast<std::int64_t>(rate.per.count()));
  // A name of this start alone: the window is the queue's, shared by every partition and
  // level, whose streams repeat entry ids, and partitions share the consumer's name.
  argv.add_copy(new_uuid_v4());
  const Reply r = ch->scripts.call(ScriptId::rate, argv);
  return Millis(r.view().check().integer());
}

/// What the tracking scripts need of a task's fields: its id, type and retention (if tracked).
Fields tracking_fields(const Task& task) {
  Fields f{{std::string(field::task_id), task.id()}, {std::string(field::task_type), task.type()}};
  if (const auto retention = task.field(field::retention)) f.emplace_back(field::retention, *retention);
  return f;
}

/// A tracked task starts: its record says running (running.lua). A failure to write that is
/// logged, not fatal: the task runs, and its completion writes its fate all the same.
void mark_running(const Shared& s, const Work& w, const Fields& tracking, std::unique_ptr<Channel>& ch) {
  try {
    if (!ch) ch = std::make_unique<Channel>(s.connection);
    Argv argv = ch->scripts.begin(ScriptId::running, 1);
    argv.add(s.keys(w.key.stream).stream).add(s.opt.group).add(s.opt.consumer_name).add(w.key.id);
    argv.add(s.opt.stream);
    for (const auto& [k, v] : tracking) argv.add(k).add(v);
    ch->scripts.call(ScriptId::running, argv).view().check();
  } catch (const std::exception& e) {
    ch.reset();
    log(LogLevel::warning, "entry " + w.key.id + ": its record could not be marked running: " + e.what());
  }
}

}  // namespace

namespace {

/// The fate of an attempt that ended, however it ended: `attempt` and `error` say how the
/// handler came back (or that it did not), `why` whether it had been asked to stop for a
/// timeout, a deadline or a cancel, which then decides.
Completion conclude(Shared& s, const Work& w, const Task& task, const HandlerOptions* options,
                    Attempt attempt, std::string error, std::optional<Millis> retry_after, StopWhy why,
                    std::optional<std::string> result, bool tracked) {
  const auto unique_lock = [&](Completion& c) {
    if (const auto unique = task.field(field::unique_key); unique && !unique->empty()) {
      c.unique = UniqueLock{unique_lock_key(s.opt.stream, *unique), task.id()};
    }
  };
  if (why == StopWhy::cancelled) {
    Completion c{w.key, Outcome::ack, tracking_fields(task)};
    c.cancelled = true;
    c.tracked = tracked;
    c.result = std::move(result);
    unique_lock(c);
    return c;
  }
  if (why == StopWhy::timeout || why == StopWhy::deadline) {
    const bool deadline = why == StopWhy::deadline;
    attempt.result = deadline ? AttemptResult::permanent : AttemptResult::failed;
    error = std::string(deadline
                            ? "deadline: the task's deadline passed while its handler ran"
                            : "timeout: the handler ran past its timeout of " +
                                  std::to_string(options != nullptr ? options->timeout.count() : 0) + " ms") +
            (error.empty() ? std::string() : " (" + error + ")");
    retry_after.reset();
  }
  const Decision d = decide(attempt);
  switch (d.verdict) {
    case Verdict::ack: {
      Completion done{w.key, Outcome::ack, {}};
      unique_lock(done);
      if (tracked) {
        done.tracked = true;
        done.fields = tracking_fields(task);
        done.result = std::move(result);
      }
      return done;
    }
    case Verdict::retry: {
      if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug, "task " + task.id() + " (" + task.type() + ") failed, retry " +
                                 std::to_string(task.retry_count() + 1) + " of " +
                                 std::to_string(task.max_retries()) + ": " + error);
      }
      Completion c{w.key, Outcome::retry, retry_copy(task.fields(), task.retry_count(), std::move(error))};
      const RetryBackoff& backoff =
          options != nullptr && options->retry_backoff ? *options->retry_backoff : s.opt.retry_backoff;
      c.delay = retry_after ? *retry_after : retry_delay(backoff, task.retry_count(), unit_random());
      c.timed_out = why != StopWhy::none;
      return c;
    }
    case Verdict::dead_letter: break;
  }
  std::string_view why_dead = d.reason;
  if (why == StopWhy::deadline) why_dead = reason::deadline;
  if (why == StopWhy::timeout && d.reason == reason::retries_exhausted) why_dead = reason::timeout;
  Completion c = dead_letter(s, w.key, w.fields, why_dead, std::move(error));
  c.timed_out = why != StopWhy::none;
  return c;
}

/// "done", "retry", "dead" or "cancelled": what a span's end says of `c`.
std::string_view outcome_name(const Completion& c) {
  if (c.cancelled) return "cancelled";
  switch (c.outcome) {
    case Outcome::ack: return "done";
    case Outcome::retry: return "retry";
    default: return "dead";
  }
}

/// A retry of an attempt with a span names that span (field retry_of_span): the next attempt
/// links to it.
void note_span(Completion& c, const Span* span) {
  if (span == nullptr || c.outcome != Outcome::retry) return;
  std::string context;
  try {
    context = span->context().traceparent;
  } catch (...) {
    log(LogLevel::warning, "tracer: a span's context could not be read (it threw)");
    return;
  }
  if (!valid_traceparent(context)) return;
  for (auto& [name, value] : c.fields) {
    if (name == field::retry_of_span) {
      value = std::move(context);
      return;
    }
  }
  c.fields.emplace_back(field::retry_of_span, std::move(context));
}

/// The trace context a task carries in `name` (and `state_name`), if valid.
std::optional<SpanContext> carried(const Task& task, std::string_view name, std::string_view state_name) {
  const auto parent = task.field(name);
  if (!parent || !valid_traceparent(*parent)) return std::nullopt;
  SpanContext c{std::string(*parent), {}};
  if (!state_name.empty()) {
    if (const auto state = task.field(state_name)) c.tracestate = std::string(*state);
  }
  return c;
}

/// The deadline of a task (EnqueueOptions::deadline), if it has a readable one.
std::optional<std::chrono::system_clock::time_point> deadline_of(const Task& task) {
  const auto text = task.field(field::deadline);
  if (!text) return std::nullopt;
  std::int64_t ms = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), ms);
  if (ec != std::errc() || end != text->data() + text->size()) return std::nullopt;
  // (Not a value a producer writes: up to 2200-01-01, within the clock's range.)
  constexpr std::int64_t kLatest = 7258118400000;
  if (ms < 0 || ms > kLatest) return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

/// A start waiting for a concurrency slot waits this long in the delayed set: 100 to 500 ms.
Millis slot_wait() { return Millis(100 + static_cast<std::int64_t>(unit_random() * 400)); }

/// Takes the concurrency slots of one start (slot.lua), in order: the queue's, then its type's.
/// On a refusal gives back the ones taken. True when every one was taken. Throws what Redis
/// throws (after giving back what it took, as far as it can).
bool take_slots(const Shared& s, TaskControl& c, const std::vector<int>& limits,
                std::unique_ptr<Channel>& ch);
void release_slots(const Shared& s, const TaskControl& c, std::size_t count, std::unique_ptr<Channel>& ch);

bool take_slots(const Shared& s, TaskControl& c, const std::vector<int>& limits,
                std::unique_ptr<Channel>& ch) {
  if (!ch) ch = std::make_unique<Channel>(s.connection);
  c.slot_holder = new_uuid_v4();
  for (std::size_t i = 0; i < c.slot_keys.size(); ++i) {
    Argv argv = ch->scripts.begin(ScriptId::slot, 1);
    argv.add(c.slot_keys[i]).add("acquire").add(c.slot_holder);
    argv.add(static_cast<std::int64_t>(s.opt.claim_min_idle.count())).add(limits[i]);
    std::int64_t taken = 0;
    try {
      taken = ch->scripts.call(ScriptId::slot, argv).view().check().integer();
    } catch (...) {
      release_slots(s, c, i, ch);
      throw;
    }
    if (taken != 1) {
      release_slots(s, c, i, ch);
      return false;
    }
  }
  return true;
}

/// Gives back the first `count` slots of `c`. A failure is logged: the slot frees itself after
/// claim_min_idle.
void release_slots(const Shared& s, const TaskControl& c, std::size_t count, std::unique_ptr<Channel>& ch) {
  for (std::size_t i = 0; i < count; ++i) {
    try {
      if (!ch) ch = std::make_unique<Channel>(s.connection);
      Argv argv = ch->scripts.begin(ScriptId::slot, 1);
      argv.add(c.slot_keys[i]).add("release").add(c.slot_holder);
      ch->scripts.call(ScriptId::slot, argv).view().check();
    } catch (const std::exception& e) {
      ch.reset();
      log(LogLevel::warning, "the concurrency slot " + c.slot_keys[i] + " of task " + c.task_id +
                                 " could not be given back (" + e.what() +
                                 "); it frees itself after claim_min_idle");
    }
  }
}

/// Counts a start against HandlerOptions::max_in_flight; false (nothing counted) when full.
bool enter_local_limit(std::atomic<int>* running, int max) {
  if (running->fetch_add(1, std::memory_order_acq_rel) < max) return true;
  running->fetch_sub(1, std::memory_order_acq_rel);
  return false;
}

}  // namespace

Completion give_up(Shared& s, TaskControl& c) {
  std::optional<std::string> result = c.reports ? c.reports->close() : std::nullopt;
  Completion done = conclude(
      s, *c.work, *c.task, c.options,
      Attempt{AttemptResult::failed, c.task->retry_count(), c.task->max_retries()},
      "its handler did not return within timeout_grace of being asked to stop; given up", std::nullopt,
      c.why() == StopWhy::none ? StopWhy::timeout : c.why(), std::move(result), c.reports != nullptr);
  done.given_up = true;
  note_span(done, c.span);
  c.given_up_as = outcome_name(done);
  return done;
}

std::optional<Completion> execute(Shared& s, const Work& w, std::unique_ptr<Channel>& channel) {
  if (!w.fields) {
    return dead_letter(s, w.key, nullptr, reason::body_lost,
                       "body lost: the entry was trimmed or deleted before it ran");
  }
  if (w.fields->size() > kMaxFields) {
    return dead_letter(s, w.key, w.fields, reason::malformed,
                       "entry has " + std::to_string(w.fields->size()) + " fields (limit " +
                           std::to_string(kMaxFields) + ")");
  }
  Decoded decoded = decode_task(w.key.id, w.fields, w.deliveries, s.limits);
  if (auto* why = std::get_if<std::string>(&decoded)) {
    return dead_letter(s, w.key, w.fields, reason::malformed, std::move(*why));
  }
  Task& task = std::get<Task>(decoded);
  const Handler* handler = &s.fallback;
  const HandlerOptions* options = nullptr;
  std::atomic<int>* local = nullptr;  // HandlerOptions::max_in_flight's count, if it has one
  if (auto it = s.handlers.find(task.type()); it != s.handlers.end()) {
    handler = &it->second.handler;
    options = &it->second.options;
    local = it->second.running.get();
  }
  if (!*handler) {
    return dead_letter(s, w.key, w.fields, reason::no_handler,
                       "no handler for task type \"" + task.type() + "\"");
  }
  const auto deadline = deadline_of(task);
  if (deadline && *deadline <= std::chrono::system_clock::now()) {
    return dead_letter(s, w.key, w.fields, reason::deadline,
                       "deadline: the task's deadline passed before it started");
  }
  if (options != nullptr && options->rate.limit > 0) {
    Millis wait{0};
    try {
      wait = rate_wait(s, task.type(), options->rate, channel);
    } catch (const std::exception& e) {
      // Running it unchecked could break the limit: put it back for a second instead (the
      // completer writes that once Redis answers again).
      log(LogLevel::warning, "rate limit of \"" + task.type() + "\" could not be checked (" + e.what() +
                                 "); task " + task.id() + " is put back for a second");
      channel.reset();
      wait = Millis(1000);
    }
    if (wait.count() > 0) return put_back(w, wait);
  }

  auto control = std::make_shared<TaskControl>();
  control->task_id = task.id();
  // HandlerOptions::max_in_flight: counted for the whole consumer (a task of a type over it waits).
  if (local != nullptr && !enter_local_limit(local, options->max_in_flight)) return put_back(w, slot_wait());
  struct LocalExit {
    std::atomic<int>* running;
    ~LocalExit() {
      if (running != nullptr) running->fetch_sub(1, std::memory_order_acq_rel);
    }
  } local_exit{local};
  // ConcurrencyLimit: the queue's, then the type's, in Redis.
  std::vector<int> limits;
  if (s.opt.concurrency_limit.limit > 0) {
    control->slot_keys.push_back(running_key(s.queue));
    limits.push_back(s.opt.concurrency_limit.limit);
  }
  if (options != nullptr && options->concurrency.limit > 0) {
    control->slot_keys.push_back(running_key(s.queue, task.type()));
    limits.push_back(options->concurrency.limit);
  }
  if (!control->slot_keys.empty()) {
    bool taken = false;
    try {
      taken = take_slots(s, *control, limits, channel);
    } catch (const std::exception& e) {
      log(LogLevel::warning, "concurrency limit of \"" + task.type() + "\" could not be checked (" +
                                 e.what() + "); task " + task.id() + " is put back for a second");
      channel.reset();
      return put_back(w, Millis(1000));
    }
    if (!taken) return put_back(w, slot_wait());
  }

  if (task.field(field::retention)) {
    mark_running(s, w, tracking_fields(task), channel);
    control->reports = std::make_shared<TaskReports>(s, channel, s.opt.stream, task.id());
    TaskAccess::attach(task, control->reports);
  }
  TaskAccess::attach(task, control);
  control->work = &w;
  control->task = &task;
  control->options = options;
  // The span before the control is shared (the watchdog reads it when it gives the task up).
  std::unique_ptr<Span> span;
  if (s.opt.tracer) {
    try {
      span = s.opt.tracer->start_attempt(task, carried(task, field::traceparent, field::tracestate),
                                         carried(task, field::retry_of_span, {}));
    } catch (const std::exception& e) {
      log(LogLevel::warning, std::string("tracer: start_attempt threw: ") + e.what());
    } catch (...) {
      log(LogLevel::warning, "tracer: start_attempt threw an unknown exception");
    }
    control->span = span.get();
  }
  s.inflight.entering(w, control);
  // Its time limit: the handler's timeout, or the task's deadline when that comes first.
  if (const Millis timeout = options != nullptr ? options->timeout : Millis(0);
      timeout.count() > 0 || deadline) {
    Clock::time_point at = Clock::time_point::max();
    StopWhy why = StopWhy::timeout;
    if (timeout.count() > 0) at = Clock::now() + timeout;
    if (deadline) {
      const auto left = std::chrono::duration_cast<Millis>(*deadline - std::chrono::system_clock::now());
      if (Clock::now() + left < at) {
        at = Clock::now() + left;
        why = StopWhy::deadline;
      }
    }
    s.watchdog->arm(control, at, why);
  }

  Attempt attempt{AttemptResult::succeeded, task.retry_count(), task.max_retries()};
  std::string error;
  std::optional<Millis> retry_after;
  bool skip = false;
  {
    std::lock_guard lock(control->mutex);
    // Cancelled before it started (the request came while it waited in the prefetch), or given
    // up already (its deadline came while it was being set up).
    skip = control->why() == StopWhy::cancelled || control->abandoned;
  }
  if (!skip) {
    try {
      Handler in_child;
      const Handler* run = handler;
      if (options != nullptr && options->executor == HandlerExecutor::process) {
        in_child = [&](const Task& t) {
          run_in_child(
              t, [&] { (*handler)(t); }, options->limits, *control, s.opt.timeout_grace, channel);
        };
        run = &in_child;
      }
      if (s.middleware.empty()) {
        (*run)(task);
      } else {
        // (A second next() fails the attempt for good: the handler must not run twice in one.)
        run_chain<PermanentError>(s.middleware, 0, task, [&](const Task& t) { (*run)(t); });
      }
    } catch (const RetryAfter& e) {
      attempt.result = AttemptResult::failed;
      error = e.what();
      retry_after = e.delay();
    } catch (const BadPayloadError& e) {
      attempt.result = AttemptResult::bad_payload;
      error = e.what();
    } catch (const PermanentError& e) {
      attempt.result = AttemptResult::permanent;
      error = e.what();
    } catch (const std::exception& e) {
      attempt.result = AttemptResult::failed;
      error = e.what();
    } catch (...) {
      attempt.result = AttemptResult::failed;
      error = "unknown exception";
    }
  }
  bool given_up = false;
  StopWhy why = StopWhy::none;
  {
    std::lock_guard lock(control->mutex);
    control->returned = true;  // from now on nothing asks it to stop: its outcome is `why`
    given_up = control->abandoned;
    why = control->why();
  }
  s.watchdog->disarm(*control);
  release_slots(s, *control, control->slot_keys.size(), channel);
  const auto end_span = [&](std::string_view outcome, std::string_view text) {
    if (!span) return;
    try {
      span->end(outcome, text);
    } catch (const std::exception& e) {
      log(LogLevel::warning, std::string("tracer: a span's end threw: ") + e.what());
    } catch (...) {
      log(LogLevel::warning, "tracer: a span's end threw an unknown exception");
    }
  };
  if (given_up) {
    if (control->reports) control->reports->close();
    log(LogLevel::warning, "task " + task.id() +
                               " was given up on and its handler has returned now; what it " +
                               "returned is dropped");
    end_span(control->given_up_as,
             "given up: its handler did not return within timeout_grace of being asked to stop");
    return std::nullopt;
  }
  std::optional<std::string> result = control->reports ? control->reports->close() : std::nullopt;
  Completion done = conclude(s, w, task, options, attempt, error, retry_after, why, std::move(result),
                             control->reports != nullptr);
  note_span(done, span.get());
  end_span(outcome_name(done), done.outcome == Outcome::ack && !done.cancelled ? std::string_view()
                               : done.error.empty()                            ? std::string_view(error)
                                                    : std::string_view(done.error));
  return done;
}

void Executor::start() {
  for (int i = 0; i < s_->opt.concurrency; ++i) {
    auto exited = std::make_shared<std::atomic<bool>>(false);
    threads_.push_back(Thread{std::thread([s = s_, exited] {
                                thread_main(*s);
                                exited->store(true);
                              }),
                              exited});
  }
}

std::size_t Executor::release_threads() {
  std::size_t detached = 0;
  for (Thread& t : threads_) {
    if (!t.thread.joinable()) continue;
    if (t.exited->load()) {
      t.thread.join();
    } else {
      t.thread.detach();
      ++detached;
    }
  }
  threads_.clear();
  return detached;
}

}  // namespace streamq::detail
