// SPDX-License-Identifier: MIT
// The fate of an attempt: conclude() after its handler returned, give_up() when the watchdog
// stopped waiting for it, dead-lettering, and the outcome names a span's end says.
#include <chrono>
#include <optional>
#include <string>

#include "attempt.hpp"
#include "log.hpp"
#include "task_reports.hpp"
#include "watchdog.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

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
  // Fenced: its holder could not keep its entry's or a concurrency slot's lease. Unless the
  // handler succeeded (a success is final, lease or not), the task goes back unrun and
  // uncounted, after the wait of a start that found no free slot; the owner check of the
  // put-back refuses it when another consumer reclaimed the entry meanwhile (its fate is theirs).
  if (why == StopWhy::lease_lost && attempt.result != AttemptResult::succeeded) {
    return hand_back(w, slot_wait());
  }
  // Interrupted by its worker's stop (a deploy): a throw then is no failure of the task.
  if (why == StopWhy::shutdown && attempt.result != AttemptResult::succeeded &&
      (options == nullptr || options->hand_back_on_shutdown)) {
    return hand_back(w, Millis(0));
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
      } else if (task.field(field::tenant)) {
        done.tenant = true;
        done.fields = tracking_fields(task);
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
      c.timed_out = why == StopWhy::timeout || why == StopWhy::deadline;
      return c;
    }
    case Verdict::dead_letter: break;
  }
  std::string_view why_dead = d.reason;
  if (why == StopWhy::deadline) why_dead = reason::deadline;
  if (why == StopWhy::timeout && d.reason == reason::retries_exhausted) why_dead = reason::timeout;
  Completion c = dead_letter(s, w.key, w.fields, why_dead, std::move(error));
  c.timed_out = why == StopWhy::timeout || why == StopWhy::deadline;
  return c;
}

std::string_view outcome_name(const Completion& c) {
  if (c.cancelled) return "cancelled";
  switch (c.outcome) {
    case Outcome::ack: return "done";
    case Outcome::retry: return "retry";
    default: return "dead";
  }
}

Completion give_up(Shared& s, TaskControl& c) {
  std::optional<std::string> result = c.reports ? c.reports->close(true) : std::nullopt;
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

}  // namespace streamq::detail
