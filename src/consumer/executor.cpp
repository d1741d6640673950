// SPDX-License-Identifier: MIT
#include "executor.hpp"

#include <chrono>
#include <optional>
#include <variant>

#include "codec.hpp"
#include "keys.hpp"
#include "lease_keeper.hpp"
#include "log.hpp"
#include "retry_policy.hpp"
#include "scripts.hpp"
#include "streamq/errors.hpp"
#include "task_reports.hpp"

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
      w = s.inflight.finish_and_take(execute(s, *w, channel), suspect);
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

/// What the tracking scripts need of a task's fields: its id, type and retention.
Fields tracking_fields(const Task& task, std::string_view retention) {
  return {{std::string(field::task_id), task.id()},
          {std::string(field::task_type), task.type()},
          {std::string(field::retention), std::string(retention)}};
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

Completion execute(Shared& s, const Work& w, std::unique_ptr<Channel>& channel) {
  if (!w.fields) {
    return dead_letter(s, w.key, nullptr, reason::body_lost,
                       "body lost: the entry was trimmed or deleted before it ran");
  }
  if (w.fields->size() > kMaxFields) {
    return dead_letter(s, w.key, w.fields, reason::malformed,
                       "entry has " + std::to_string(w.fields->size()) + " fields (limit " +
                           std::to_string(kMaxFields) + ")");
  }
  Decoded decoded = decode_task(w.key.id, w.fields, w.deliveries, s.limits, s.stopping.get_token());
  if (auto* why = std::get_if<std::string>(&decoded)) {
    return dead_letter(s, w.key, w.fields, reason::malformed, std::move(*why));
  }
  Task& task = std::get<Task>(decoded);
  const Handler* handler = &s.fallback;
  const HandlerOptions* options = nullptr;
  if (auto it = s.handlers.find(task.type()); it != s.handlers.end()) {
    handler = &it->second.handler;
    options = &it->second.options;
  }
  if (!*handler) {
    return dead_letter(s, w.key, w.fields, reason::no_handler,
                       "no handler for task type \"" + task.type() + "\"");
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
  std::shared_ptr<TaskReports> reports;
  Fields tracking;
  if (const auto retention = task.field(field::retention)) {
    tracking = tracking_fields(task, *retention);
    mark_running(s, w, tracking, channel);
    reports = std::make_shared<TaskReports>(s, channel, s.opt.stream, task.id());
    TaskAccess::attach(task, reports);
  }
  Attempt attempt{AttemptResult::succeeded, task.retry_count(), task.max_retries()};
  std::string error;
  std::optional<Millis> retry_after;
  s.inflight.entering(w);
  try {
    (*handler)(task);
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
  std::optional<std::string> result = reports ? reports->close() : std::nullopt;
  const Decision d = decide(attempt);
  switch (d.verdict) {
    case Verdict::ack: {
      Completion done{w.key, Outcome::ack, {}};
      if (const auto unique = task.field(field::unique_key); unique && !unique->empty()) {
        done.unique = UniqueLock{unique_lock_key(s.opt.stream, *unique), task.id()};
      }
      if (reports) {
        done.tracked = true;
        done.fields = std::move(tracking);
        done.result = std::move(result);
      }
      return done;
    }
    case Verdict::retry:
      if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug, "task " + task.id() + " (" + task.type() + ") failed, retry " +
                                 std::to_string(task.retry_count() + 1) + " of " +
                                 std::to_string(task.max_retries()) + ": " + error);
      }
      {
        Completion c{w.key, Outcome::retry, retry_copy(task.fields(), task.retry_count(), std::move(error))};
        const RetryBackoff& backoff =
            options != nullptr && options->retry_backoff ? *options->retry_backoff : s.opt.retry_backoff;
        c.delay = retry_after ? *retry_after : retry_delay(backoff, task.retry_count(), unit_random());
        return c;
      }
    case Verdict::dead_letter: break;
  }
  return dead_letter(s, w.key, w.fields, d.reason, std::move(error));
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
