// SPDX-License-Identifier: MIT
#include "executor.hpp"

#include <chrono>
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

}  // namespace

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
