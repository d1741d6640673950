// SPDX-License-Identifier: MIT
#include "executor.hpp"

#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <variant>

#include "attempt.hpp"
#include "lease_keeper.hpp"
#include "log.hpp"
#include "process_runner.hpp"
#include "retry_policy.hpp"
#include "streamq/errors.hpp"
#include "task_control.hpp"
#include "task_reports.hpp"
#include "util/middleware_chain.hpp"
#include "watchdog.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {
namespace {

void thread_main(const std::shared_ptr<Shared>& shared) {
  Shared& s = *shared;
  std::unique_ptr<Channel> channel;
  std::optional<Work> w = s.inflight.take();
  while (w) {
    const bool suspect = w->suspect();
    const EntryKey key = w->key;
    try {
      if (suspect) {
        const std::int64_t counted_from = w->deliveries;
        const Start start = start_suspect(s, *w, channel);
        if (start == Start::gone) report_gone(s, key.stream, {key.id});
        const StartVerdict verdict =
            start == Start::run ? s.inflight.started(key, counted_from) : StartVerdict::skip;
        if (verdict != StartVerdict::run) {
          if (verdict == StartVerdict::skip) s.inflight.not_run(key, suspect);
          w = s.inflight.take();
          continue;
        }
      }
      Executed executed = execute(shared, std::move(*w), channel);
      w = executed.later ? s.inflight.take() : s.inflight.finish_and_take(std::move(executed.done), suspect);
    } catch (const std::exception& e) {
      // Our own failure (memory): the entry stays pending and is reclaimed after claim_min_idle.
      log(LogLevel::error, "entry " + key.id + " could not be run: " + e.what());
      s.inflight.not_run(key, suspect);
      w = s.inflight.take();
    }
  }
}

}  // namespace

namespace {

/// The handler of a task's type, its options and its HandlerOptions::max_in_flight count (null
/// when it has none), or the fallback (on_unknown) without options.
struct Registered {
  const Handler* handler = nullptr;
  const AsyncHandler* async = nullptr;  // Consumer::on_async: `handler` is then empty
  const HandlerOptions* options = nullptr;
  std::atomic<int>* local = nullptr;
};

// Step 1: what the entry holds. A completion (a dead letter) when it cannot run: no body, too
// many fields, not a task, no handler for its type, or its deadline passed before it started.
std::optional<Completion> refuse_unrunnable(Shared& s, const Work& w, std::optional<Task>& decoded_task,
                                            Registered& r) {
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
  const Task& task = decoded_task.emplace(std::move(std::get<Task>(decoded)));
  r.handler = &s.fallback;
  if (auto it = s.handlers.find(task.type()); it != s.handlers.end()) {
    const Registration& reg = it->second;
    r = {&reg.handler, reg.async ? &reg.async : nullptr, &reg.options, reg.running.get()};
  }
  if (!*r.handler && r.async == nullptr) {
    return dead_letter(s, w.key, w.fields, reason::no_handler,
                       "no handler for task type \"" + task.type() + "\"");
  }
  if (const auto deadline = deadline_of(task); deadline && *deadline <= std::chrono::system_clock::now()) {
    return dead_letter(s, w.key, w.fields, reason::deadline,
                       "deadline: the task's deadline passed before it started");
  }
  return std::nullopt;
}

/// HandlerOptions::max_in_flight's place of a start, given back when the attempt ends.
struct LocalPlace {
  std::atomic<int>* running = nullptr;
  LocalPlace() = default;
  LocalPlace(const LocalPlace&) = delete;
  LocalPlace& operator=(const LocalPlace&) = delete;
  ~LocalPlace() { give_back(); }
  void give_back() {
    if (running != nullptr) running->fetch_sub(1, std::memory_order_acq_rel);
    running = nullptr;
  }
};

// Step 2: the limits on a start, the ones that cost nothing to give back first, so a start put
// back spends nothing: the consumer's own max_in_flight, then the concurrency slots in Redis
// (given back at once on a refusal), then the rate limit, whose window counts a start for good.
// A put-back when a limit is reached (or cannot be checked: running unchecked could break it).
std::optional<Completion> take_limits(Shared& s, const Work& w, const Task& task, const Registered& r,
                                      const std::shared_ptr<TaskControl>& shared_control, LocalPlace& place,
                                      std::unique_ptr<Channel>& channel) {
  TaskControl& control = *shared_control;
  const HandlerOptions* options = r.options;
  if (r.local != nullptr) {
    if (!enter_local_limit(r.local, options->max_in_flight)) return put_back(w, slot_wait());
    place.running = r.local;
  }
  // ConcurrencyLimit: the queue's, then the type's, in Redis.
  std::vector<int> limits;
  if (s.opt.concurrency_limit.limit > 0) {
    control.slot_keys.push_back(running_key(s.queue));
    limits.push_back(s.opt.concurrency_limit.limit);
  }
  if (options != nullptr && options->concurrency.limit > 0) {
    control.slot_keys.push_back(running_key(s.queue, task.type()));
    limits.push_back(options->concurrency.limit);
  }
  const auto unchecked = [&](const char* what, const std::exception& e) {
    log(LogLevel::warning, std::string(what) + " of \"" + task.type() + "\" could not be checked (" +
                               e.what() + "); task " + task.id() + " is put back for a second");
    channel.reset();
    return put_back(w, Millis(1000));
  };
  if (!control.slot_keys.empty()) {
    const Clock::time_point asked = Clock::now();  // the slots' leases run at least a lease from here
    bool taken = false;
    try {
      taken = take_slots(s, control, limits, channel);
    } catch (const std::exception& e) {
      return unchecked("concurrency limit", e);
    }
    if (!taken) return put_back(w, slot_wait());
    // The holder fences itself unless the lease keeper renews the slots in time.
    s.watchdog->fence(shared_control, asked + fence_after(s.opt.claim_min_idle));
  }
  if (options != nullptr && options->rate.limit > 0) {
    const auto give_slots_back = [&] {
      s.watchdog->disarm(control);
      release_slots(s, control, control.slot_keys.size(), channel);
    };
    Millis wait{0};
    try {
      wait = rate_wait(s, task.type(), options->rate, channel);
    } catch (const std::exception& e) {
      give_slots_back();
      return unchecked("rate limit", e);
    }
    if (wait.count() > 0) {
      give_slots_back();
      return put_back(w, wait);
    }
  }
  return std::nullopt;
}

// Step 3: the attempt's set-up: a tracked task's start is queued for the completer to mark
// (no round trip here) and its reports open (the completer writes them too), its span starts,
// the in-flight set knows its control, and its time limit (the handler's timeout, or the
// task's deadline when that comes first) is armed. Returns the span (null: no tracer).
std::unique_ptr<Span> set_up_attempt(Shared& s, const Work& w, Task& task, const Registered& r,
                                     const std::shared_ptr<TaskControl>& control) {
  const HandlerOptions* options = r.options;
  std::shared_ptr<TaskReports> reports;
  if (task.field(field::retention)) {
    s.inflight.mark_started(StartMark{w.key, w.deliveries, tracking_fields(task)});
    reports = std::make_shared<TaskReports>(s, std::make_shared<ReportBox>(w.key, task.id()));
    TaskAccess::attach(task, reports);
  }
  TaskAccess::attach(task, control);
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
  }
  {
    // Under its lock: the watchdog may hold the control already (a concurrency slot's fence),
    // and gives the task up from these.
    std::lock_guard lock(control->mutex);
    control->reports = std::move(reports);
    control->work = &w;
    control->task = &task;
    control->options = options;
    control->span = span.get();
  }
  s.inflight.entering(w, control);
  const auto deadline = deadline_of(task);
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
  return span;
}

/// How the handler came back.
struct Returned {
  AttemptResult result = AttemptResult::succeeded;
  std::string error;
  std::optional<Millis> retry_after;
};

// Step 4: the handler, through the middleware, in a child process with the process executor.
// Unless the task was cancelled before it started (while it waited in the prefetch), fenced (its
// slot's lease could not be renewed meanwhile) or given up already (its deadline came while it
// was being set up).
/// How the handler came back, from what it threw (null: it returned).
Returned returned_from(const std::exception_ptr& thrown) {
  if (!thrown) return {};
  try {
    std::rethrow_exception(thrown);
  } catch (const RetryAfter& e) {
    return {AttemptResult::failed, e.what(), e.delay()};
  } catch (const BadPayloadError& e) {
    return {AttemptResult::bad_payload, e.what(), std::nullopt};
  } catch (const PermanentError& e) {
    return {AttemptResult::permanent, e.what(), std::nullopt};
  } catch (const std::exception& e) {
    return {AttemptResult::failed, e.what(), std::nullopt};
  } catch (...) {
    return {AttemptResult::failed, "unknown exception", std::nullopt};
  }
}

/// Whether the handler must not be called: the task was cancelled before it started (while it
/// waited in the prefetch), fenced (its slot's lease could not be renewed meanwhile) or given up
/// already (its deadline came while it was being set up).
bool stopped_before_start(TaskControl& control) {
  std::lock_guard lock(control.mutex);
  const StopWhy why = control.why();
  return why == StopWhy::cancelled || why == StopWhy::lease_lost || control.abandoned;
}

Returned run_handler(Shared& s, const Task& task, const Registered& r, TaskControl& control) {
  if (stopped_before_start(control)) return {};
  try {
    Handler in_child;
    const Handler* run = r.handler;
    if (r.options != nullptr && r.options->executor == HandlerExecutor::process) {
      in_child = [&](const Task& t) {
        if (!s.pool) throw Error("process executor: no fork server (the handler was registered after run())");
        // The child's switch counts from the entry's last renewal (it may have waited in the
        // prefetch), until the watchdog's sweeps move it on.
        const std::optional<Clock::time_point> leased = s.inflight.lease_of(control.work->key);
        control.entry_lease_until.store(
            lease_time(leased.value_or(Clock::now()) + dead_man_after(s.opt.claim_min_idle)),
            std::memory_order_relaxed);
        run_in_child(*s.pool, t, control, s.opt.timeout_grace);
      };
      run = &in_child;
    }
    if (s.middleware.empty()) {
      (*run)(task);
    } else {
      // (A second next() fails the attempt for good: the handler must not run twice in one.)
      run_chain<PermanentError>(s.middleware, 0, task, [&](const Task& t) { (*run)(t); });
    }
  } catch (...) {
    return returned_from(std::current_exception());
  }
  return {};
}

void end_span(const std::unique_ptr<Span>& span, std::string_view outcome, std::string_view text) {
  if (!span) return;
  try {
    span->end(outcome, text);
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("tracer: a span's end threw: ") + e.what());
  } catch (...) {
    log(LogLevel::warning, "tracer: a span's end threw an unknown exception");
  }
}

/// One attempt, from its entry to its fate, through the steps above: on the heap, since an
/// asynchronous handler's attempt ends on another thread, after its handler thread moved on.
struct AttemptRun {
  AttemptRun(std::shared_ptr<Shared> shared, Work work) : s(std::move(shared)), w(std::move(work)) {}
  AttemptRun(const AttemptRun&) = delete;
  AttemptRun& operator=(const AttemptRun&) = delete;
  /// Its control may outlive it (the in-flight set holds it until the completion is queued, and
  /// longer after a failure of our own): nobody reaches its work, task or span through it then.
  ~AttemptRun() {
    if (!control) return;
    std::lock_guard lock(control->mutex);
    control->returned = true;
    control->work = nullptr;
    control->task = nullptr;
    control->span = nullptr;
  }
  std::shared_ptr<Shared> s;  // held: an asynchronous end may come while the consumer stops
  const Work w;
  std::optional<Task> task;
  Registered registered;
  std::shared_ptr<TaskControl> control;
  LocalPlace place;
  std::unique_ptr<Span> span;
};

// Steps 5 and 6: the handler is back, however it came back. From now on nothing asks it to
// stop: its outcome is `why`. Then its fate, unless it was given up on meanwhile.
// With `channel_lock`, `channel` is the one the asynchronous attempts share, used under it.
std::optional<Completion> handler_back(AttemptRun& a, const Returned& returned,
                                       std::unique_ptr<Channel>& channel,
                                       std::mutex* channel_lock = nullptr) {
  Shared& s = *a.s;
  TaskControl& control = *a.control;
  const Task& task = *a.task;
  bool given_up = false;
  StopWhy why = StopWhy::none;
  {
    std::lock_guard lock(control.mutex);
    control.returned = true;
    given_up = control.abandoned;
    why = control.why();
  }
  s.watchdog->disarm(control);
  if (!control.slot_keys.empty()) {
    std::unique_lock<std::mutex> lock;
    if (channel_lock != nullptr) lock = std::unique_lock(*channel_lock);
    release_slots(s, control, control.slot_keys.size(), channel);
  }
  if (given_up) {
    if (control.reports) control.reports->close(true);
    log(LogLevel::warning, "task " + task.id() +
                               " was given up on and its handler has returned now; what it " +
                               "returned is dropped");
    end_span(a.span, control.given_up_as,
             "given up: its handler did not return within timeout_grace of being asked to stop");
    return std::nullopt;
  }
  std::optional<std::string> result = control.reports ? control.reports->close() : std::nullopt;
  Completion done = conclude(s, a.w, task, a.registered.options,
                             Attempt{returned.result, task.retry_count(), task.max_retries()}, returned.error,
                             returned.retry_after, why, std::move(result), control.reports != nullptr);
  note_span(done, a.span.get());
  end_span(a.span, outcome_name(done),
           done.outcome == Outcome::ack && !done.cancelled ? std::string_view()
           : done.error.empty()                            ? std::string_view(returned.error)
                                                           : std::string_view(done.error));
  return done;
}

/// An asynchronous handler's attempt ends, with what its handler threw or said (null: nothing):
/// steps 5 and 6 on the calling thread, and the completion to the in-flight set. Never throws:
/// it runs in a `done`, or in the destructor of its last copy.
void end_async(AttemptRun& a, const std::exception_ptr& thrown) noexcept {
  Shared& s = *a.s;
  try {
    AsyncChannel& shared_channel = *s.async_channel;
    std::optional<Completion> done =
        handler_back(a, returned_from(thrown), shared_channel.channel, &shared_channel.mutex);
    // The place is free once the task is done, whoever keeps a copy of its `done`.
    a.place.give_back();
    s.inflight.finish(std::move(done), a.w.suspect());
    return;
  } catch (const std::exception& e) {
    log(LogLevel::error, "entry " + a.w.key.id + " could not be completed: " + e.what());
  } catch (...) {
    log(LogLevel::error, "entry " + a.w.key.id + " could not be completed");
  }
  // Our own failure (memory): the entry stays pending and is reclaimed after claim_min_idle.
  s.inflight.not_run(a.w.key, a.w.suspect());
}

/// What an asynchronous attempt waits for before it ends: its start's return (the middleware
/// and the handler's call) and the handler's `done`, and the first error either had. It holds
/// the attempt until then, and only until then.
class AsyncEnd {
 public:
  explicit AsyncEnd(std::shared_ptr<AttemptRun> attempt) : attempt_(std::move(attempt)) {}

  /// The start returned (`thrown`: what it threw, null if nothing). A handler that threw before
  /// its `done` came has failed: its `done` is ignored from then on.
  void started(const std::exception_ptr& thrown, bool handler_threw) {
    std::unique_lock lock(mutex_);
    if (handler_threw && !done_called_) {
      done_called_ = true;
      threw_ = true;
      --waiting_;
      keep(thrown);
    } else if (!handler_threw) {
      keep(thrown);  // a middleware's error after a handler that returned
    }
    arrive(lock);
  }

  /// The handler's `done`: the first call counts.
  void done(const std::exception_ptr& thrown, std::string_view why_ignored_if_late = {}) {
    std::unique_lock lock(mutex_);
    if (done_called_) {
      if (why_ignored_if_late.empty()) {
        log(LogLevel::warning, "task " + task_id_ + ": " +
                                   (threw_ ? "its asynchronous handler threw, then called done: ignored"
                                           : "its asynchronous handler said it was done twice: ignored"));
      }
      return;
    }
    done_called_ = true;
    keep(thrown);
    arrive(lock);
  }

 private:
  void keep(const std::exception_ptr& thrown) {
    if (thrown && !error_) error_ = thrown;
  }
  /// One of the two came; the last one ends the attempt, outside the lock.
  void arrive(std::unique_lock<std::mutex>& lock) {
    if (--waiting_ > 0) return;
    std::shared_ptr<AttemptRun> attempt = std::move(attempt_);
    const std::exception_ptr error = error_;
    lock.unlock();
    if (attempt) end_async(*attempt, error);
  }

  std::mutex mutex_;
  std::shared_ptr<AttemptRun> attempt_;
  std::string task_id_ = attempt_ ? attempt_->control->task_id : std::string();
  int waiting_ = 2;
  bool done_called_ = false;
  bool threw_ = false;
  std::exception_ptr error_;
};

/// What every copy of an asynchronous handler's `done` shares. When the last copy goes without
/// having been called (a callback dropped, an io_context destroyed with the coroutine pending),
/// the attempt ends as a failure instead of holding its entry, its slots and its place for good.
struct DoneToken {
  explicit DoneToken(std::shared_ptr<AsyncEnd> e) : end(std::move(e)) {}
  DoneToken(const DoneToken&) = delete;
  DoneToken& operator=(const DoneToken&) = delete;
  ~DoneToken() {
    try {
      end->done(std::make_exception_ptr(
                    Error("the asynchronous handler's done was destroyed without being called")),
                "dropped");
    } catch (...) {
      log(LogLevel::error, "an asynchronous handler's dropped done could not end its attempt");
    }
  }
  std::shared_ptr<AsyncEnd> end;
};

// Step 4, for an asynchronous handler: the middleware and the handler are called here, and the
// attempt ends (steps 5 and 6) where the later of its start's return and its `done` comes.
void start_async(const std::shared_ptr<AttemptRun>& a) {
  if (stopped_before_start(*a->control)) {
    end_async(*a, nullptr);
    return;
  }
  auto end = std::make_shared<AsyncEnd>(a);
  auto token = std::make_shared<DoneToken>(end);
  Consumer::AsyncDone done = [token](const std::exception_ptr& thrown) { token->end->done(thrown); };
  token.reset();  // the copies of `done` own it now
  bool called = false;
  bool handler_threw = false;
  std::exception_ptr thrown;
  try {
    const AsyncHandler& handler = *a->registered.async;
    const auto call = [&](const Task& t) {
      called = true;
      try {
        handler(t, done);
      } catch (...) {
        handler_threw = true;
        throw;
      }
    };
    if (a->s->middleware.empty()) {
      call(*a->task);
    } else {
      run_chain<PermanentError>(a->s->middleware, 0, *a->task, call);
    }
  } catch (...) {
    thrown = std::current_exception();
  }
  // A handler never called (a middleware did not call next(), or threw first) has no `done` to
  // wait for: the start's outcome is the attempt's.
  if (!called) end->done(nullptr, "never called");
  end->started(thrown, handler_threw);
}

}  // namespace

Executed execute(const std::shared_ptr<Shared>& shared, Work w, std::unique_ptr<Channel>& channel) {
  Shared& s = *shared;
  auto a = std::make_shared<AttemptRun>(shared, std::move(w));
  if (auto refused = refuse_unrunnable(s, a->w, a->task, a->registered)) return {std::move(refused)};
  Task& task = *a->task;

  a->control = std::make_shared<TaskControl>();
  a->control->task_id = task.id();
  if (auto back = take_limits(s, a->w, task, a->registered, a->control, a->place, channel))
    return {std::move(back)};

  a->span = set_up_attempt(s, a->w, task, a->registered, a->control);
  if (a->registered.async != nullptr) {
    start_async(a);
    return {std::nullopt, true};
  }
  return {handler_back(*a, run_handler(s, task, a->registered, *a->control), channel)};
}

void Executor::start() {
  if (!s_->async_channel) s_->async_channel = std::make_shared<AsyncChannel>();
  for (int i = 0; i < s_->opt.concurrency; ++i) {
    auto exited = std::make_shared<std::atomic<bool>>(false);
    threads_.push_back(Thread{std::thread([s = s_, exited] {
                                thread_main(s);
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
