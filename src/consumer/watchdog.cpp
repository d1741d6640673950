// SPDX-License-Identifier: MIT
#include "watchdog.hpp"

#include <algorithm>
#include <string>

#include "log.hpp"

namespace streamq::detail {

std::string_view to_string(StopWhy why) noexcept {
  switch (why) {
    case StopWhy::none: return "";
    case StopWhy::timeout: return "timeout";
    case StopWhy::deadline: return "deadline";
    case StopWhy::cancelled: return "cancelled";
    case StopWhy::shutdown: return "shutdown";
    case StopWhy::lease_lost: return "lease_lost";
  }
  return "";
}

void Watchdog::set_locked(const std::shared_ptr<TaskControl>& c, Clock::time_point at, bool hard) {
  if (stopped_) return;
  if (c->timer) {
    if (c->hard && (*c->timer)->first <= at) return;  // an earlier give-up stands
    timers_.erase(*c->timer);
  }
  const bool first = timers_.empty() || at < timers_.begin()->first;
  c->watched.store(true, std::memory_order_release);
  c->timer = timers_.emplace(at, c);
  c->hard = hard;
  if (!thread_.joinable()) {
    thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
  } else if (first) {
    cv_.notify_one();
  }
}

void Watchdog::arm(const std::shared_ptr<TaskControl>& c, Clock::time_point at, StopWhy why) {
  std::lock_guard lock(mutex_);
  c->soft_why = why;
  set_locked(c, at, false);
}

void Watchdog::asked(const std::shared_ptr<TaskControl>& c) {
  std::lock_guard lock(mutex_);
  set_locked(c, Clock::now() + s_.opt.timeout_grace, true);
}

void Watchdog::watch_entry_leases() {
  std::lock_guard lock(mutex_);
  if (stopped_ || sweeping_) return;
  sweeping_ = true;
  next_sweep_ = Clock::now() + sweep_period(s_.opt.heartbeat_interval, s_.opt.claim_min_idle);
  if (!thread_.joinable()) {
    thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
  } else {
    cv_.notify_one();
  }
}

void Watchdog::sweep_entry_leases() {
  const Clock::time_point now = Clock::now();
  const Clock::time_point stale = now - fence_after(s_.opt.claim_min_idle);
  for (const auto& [c, lease_at] : s_.inflight.running_leases()) {
    // A child process's dead man's switch: its entry's lease, or, for an entry no longer leased,
    // this sweep (the worker is alive).
    c->entry_lease_until.store(lease_time(lease_at.value_or(now) + dead_man_after(s_.opt.claim_min_idle)),
                               std::memory_order_relaxed);
    if (lease_at && *lease_at <= stale) fence_now(c, "its entry's lease");
  }
}

void Watchdog::fence_now(const std::shared_ptr<TaskControl>& c, std::string_view what) {
  {
    // One that returned meanwhile has nothing to stop; one asked to stop already (a timeout, a
    // cancel, an earlier fence) is being given up.
    std::lock_guard held(c->mutex);
    const StopWhy why = c->why();
    if (c->returned || (why != StopWhy::none && why != StopWhy::shutdown)) return;
  }
  {
    std::lock_guard lock(mutex_);
    set_locked(c, Clock::now() + s_.opt.timeout_grace, true);
  }
  log(LogLevel::warning, "task " + c->task_id + ": " + std::string(what) +
                             " could not be renewed for most of claim_min_idle; it is stopped and put back "
                             "before another worker may take it over");
  c->request(StopWhy::lease_lost);
}

void Watchdog::fence(const std::shared_ptr<TaskControl>& c, Clock::time_point at) {
  // The child's switch comes after the fence (the live worker stops its child first), as for
  // the entry's lease: at the same fraction of the lease as dead_man_after.
  const Millis lease = s_.opt.claim_min_idle;
  c->slot_lease_until.store(lease_time(at + (dead_man_after(lease) - fence_after(lease))),
                            std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  if (stopped_) return;
  if (c->fence_timer) fences_.erase(*c->fence_timer);
  const bool first = fences_.empty() || at < fences_.begin()->first;
  c->watched.store(true, std::memory_order_release);
  c->fence_timer = fences_.emplace(at, c);
  if (!thread_.joinable()) {
    thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
  } else if (first) {
    cv_.notify_one();
  }
}

void Watchdog::disarm(TaskControl& c) {
  if (!c.watched.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex_);
  if (c.timer) {
    timers_.erase(*c.timer);
    c.timer.reset();
  }
  if (c.fence_timer) {
    fences_.erase(*c.fence_timer);
    c.fence_timer.reset();
  }
}

void Watchdog::stop() {
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    sweeping_ = false;
    next_sweep_ = Clock::time_point::max();
    for (auto& [at, weak] : timers_) {
      if (auto c = weak.lock()) c->timer.reset();
    }
    timers_.clear();
    for (auto& [at, weak] : fences_) {
      if (auto c = weak.lock()) c->fence_timer.reset();
    }
    fences_.clear();
  }
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void Watchdog::main(const std::stop_token& stop) {
  std::unique_lock lock(mutex_);
  // The earliest of the time limits and the fences.
  const auto earliest = [&] {
    auto at = next_sweep_;
    if (!timers_.empty()) at = std::min(at, timers_.begin()->first);
    if (!fences_.empty()) at = std::min(at, fences_.begin()->first);
    return at;
  };
  while (!stop.stop_requested()) {
    if (timers_.empty() && fences_.empty() && !sweeping_) {
      cv_.wait(lock, stop, [&] { return !timers_.empty() || !fences_.empty() || sweeping_; });
      continue;
    }
    const Clock::time_point due = earliest();
    if (Clock::now() < due) {
      cv_.wait_until(lock, stop, due, [&] { return earliest() < due; });
      continue;
    }
    if (due == next_sweep_) {
      next_sweep_ = Clock::now() + sweep_period(s_.opt.heartbeat_interval, s_.opt.claim_min_idle);
      lock.unlock();
      sweep_entry_leases();
      lock.lock();
      continue;
    }
    if (!fences_.empty() && fences_.begin()->first == due) {
      // A holder that could not renew its slots in time stops its task before their leases end.
      std::shared_ptr<TaskControl> c = fences_.begin()->second.lock();
      fences_.erase(fences_.begin());
      if (!c) continue;
      c->fence_timer.reset();
      lock.unlock();
      fence_now(c, "its concurrency slot");
      lock.lock();
      continue;
    }
    std::shared_ptr<TaskControl> c = timers_.begin()->second.lock();
    timers_.erase(timers_.begin());
    if (!c) continue;
    c->timer.reset();
    const bool hard = c->hard;
    const StopWhy soft_why = c->soft_why;
    if (!hard) set_locked(c, Clock::now() + s_.opt.timeout_grace, true);
    lock.unlock();
    fire(c, hard, soft_why);
    lock.lock();
  }
}

void Watchdog::fire(const std::shared_ptr<TaskControl>& c, bool hard, StopWhy soft_why) {
  if (!hard) {
    c->request(soft_why);
    return;
  }
  std::unique_lock lock(c->mutex);
  // (A task fenced before its set-up has nothing to give up: it will not start.)
  if (c->returned || c->abandoned || c->task == nullptr) return;
  c->abandoned = true;
  const std::string id = c->task->id();
  try {
    Completion done = give_up(s_, *c);
    if (!s_.inflight.give_up(std::move(done), c->work->seq)) {
      c->abandoned = false;  // no longer held as running (lost meanwhile): its handler's return decides
      return;
    }
  } catch (const std::exception& e) {
    // (Memory.) The entry stays held until its handler returns, as without a time limit.
    c->abandoned = false;
    log(LogLevel::error, "task " + id + " could not be given up: " + e.what());
    return;
  }
  log(LogLevel::warning, "task " + id + " was asked to stop (" + std::string(to_string(c->why())) +
                             ") and its handler did not return within timeout_grace; it is given up: its "
                             "fate is written now and whatever its thread does later is dropped");
}

}  // namespace streamq::detail
