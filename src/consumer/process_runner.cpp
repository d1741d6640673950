// SPDX-License-Identifier: MIT
#include "process_runner.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstring>
#include <optional>
#include <string>

#include "streamq/errors.hpp"
#include "task_reports.hpp"

namespace streamq::detail {
namespace {

std::string death(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "the handler's process was killed by signal " + std::to_string(sig) + " (" +
           (name != nullptr ? name : "?") + ")";
  }
  if (WIFEXITED(status)) {
    return "the handler's process exited with status " + std::to_string(WEXITSTATUS(status)) +
           " before it reported";
  }
  return "the handler's process ended without a report";
}

/// Until when the child may run: the earlier of its leases (the entry's; its slots', when it
/// holds any).
std::int64_t deadline(const TaskControl& c) {
  const std::int64_t entry = c.entry_lease_until.load(std::memory_order_relaxed);
  const std::int64_t slot = c.slot_lease_until.load(std::memory_order_relaxed);
  return slot != 0 && (entry == 0 || slot < entry) ? slot : entry;
}

/// Hands `task` to a child (a second one if the first is found gone before it took it).
std::unique_ptr<PoolChild> hand_over(ProcessPool& pool, const Task& task, bool tracked) {
  TaskMessage m;
  m.entry_id = task.entry_id();
  m.fields = *TaskAccess::fields(task);
  m.deliveries = task.deliveries();
  m.created_at = task.created_at();
  m.retry_count = task.retry_count();
  m.max_retries = task.max_retries();
  m.tracked = tracked;
  const std::string body = encode(m);
  // Every idle child may have left (killed while idle, by an operator or the OOM killer); the
  // last try is a new child.
  for (std::size_t attempt = 0;; ++attempt) {
    std::unique_ptr<PoolChild> child = pool.acquire();
    if (send_frame(child->fd, FrameKind::task, body)) return child;
    pool.discard(std::move(child));
    if (attempt == pool.capacity()) throw Error("process executor: no child took the task");
  }
}

/// Throws what the handler threw in the child.
void rethrow(const Report& r) {
  switch (r.ended) {
    case Ended::returned: return;
    case Ended::retry_after: throw RetryAfter(std::chrono::milliseconds(r.retry_ms), r.error);
    case Ended::bad_payload: throw BadPayloadError(r.error);
    case Ended::permanent: throw PermanentError(r.error);
    case Ended::failed: break;
  }
  throw Error(r.error);
}

}  // namespace

void run_in_child(ProcessPool& pool, const Task& task, TaskControl& control,
                  std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(control.mutex);
    // Asked to stop (or given up) while a middleware ran: no task to hand over.
    if (control.abandoned || control.why() != StopWhy::none) {
      throw Error(std::string("asked to stop (") + std::string(to_string(control.why())) +
                  ") before its process started");
    }
  }
  std::unique_ptr<PoolChild> child = hand_over(pool, task, control.reports != nullptr);
  pool.set_deadline(*child, deadline(control));
  FrameBuffer in;
  std::optional<Report> report;
  bool malformed = false, eof = false, terminated = false, killed = false;
  Clock::time_point kill_at = Clock::time_point::max();
  // Stops the child's group (the child and what it started) once the task is asked to stop.
  const auto enforce = [&] {
    // (Not for the worker's stop: a child, like a thread, gets shutdown_grace to finish.)
    if (!terminated && control.why() != StopWhy::none && control.why() != StopWhy::shutdown) {
      pool.signal(*child, SIGTERM);
      terminated = true;
      kill_at = Clock::now() + grace / 2;
    }
    if (!killed && Clock::now() >= kill_at) {
      pool.signal(*child, SIGKILL);
      killed = true;
    }
  };
  // The child's socket is read until its report or its end; a throw meanwhile (no memory)
  // leaves it with no task: it is discarded, not kept.
  try {
    while (!report && !malformed && !eof) {
      pool.set_deadline(*child, deadline(control));
      pollfd p{child->fd, POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        eof = !in.fill(child->fd);
        while (std::optional<Frame> f = in.next()) {
          if (f->kind == FrameKind::write) {
            WireReader r(f->body);
            std::string what, value;
            const bool ok =
                r.bytes(what) && r.bytes(value) && control.reports && control.reports->write(what, value);
            send_frame(child->fd, FrameKind::written, ok ? "1" : "0");
            continue;
          }
          report = f->kind == FrameKind::report ? decode_report(f->body) : std::nullopt;
          malformed = !report;
          break;
        }
      }
      if (!report) enforce();
    }
  } catch (...) {
    pool.discard(std::move(child));
    throw;
  }
  pool.set_deadline(*child, 0);
  if (report && !report->retiring && !terminated) {
    pool.release(std::move(child));
  } else {
    const ChildEnd end = pool.discard(std::move(child));
    if (!report) {
      if (end.by_deadline) control.request(StopWhy::lease_lost);
      std::string why = end.known ? death(end.status) : "the handler's process ended without a report";
      if (malformed) why = "the handler's process sent a malformed report";
      if (end.by_deadline) why += " (its dead man's switch: the worker did not renew its leases in time)";
      throw Error(why);
    }
  }
  if (report->result) task.set_result(*report->result);
  rethrow(*report);
}

}  // namespace streamq::detail
