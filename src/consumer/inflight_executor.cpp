// SPDX-License-Identifier: MIT
// The in-flight set, continued: the executor's side of it (which entry a handler takes next,
// its start, the task controls of running entries, and what ending a task frees). See
// inflight.hpp.
#include <algorithm>
#include <thread>

#include "inflight.hpp"
#include "streamq/task.hpp"
#include "task_control.hpp"

namespace streamq::detail {
namespace {

/// The task id of an entry's body (`entry_id` when it has none).
std::string task_id_in(const Fields* fields, const std::string& entry_id) {
  if (fields != nullptr) {
    for (const auto& [name, value] : *fields) {
      if (name == field::task_id) return value;
    }
  }
  return entry_id;
}

}  // namespace

// ------------------------------------------------------------------ executor

bool InFlight::last_chance(const Work& w) const {
  return w.suspect() && (max_deliveries_ <= 0 || w.deliveries + 1 >= max_deliveries_);
}

std::deque<Work>::iterator InFlight::next_runnable() {
  return std::find_if(ready_.begin(), ready_.end(), [&](const Work& w) {
    if (!w.suspect()) return true;
    if (last_chance_running_) return false;
    return !last_chance(w) || suspects_running_ == 0;
  });
}

void InFlight::suspect_ended() {
  if (suspects_running_ > 0 && --suspects_running_ == 0) last_chance_running_ = false;
}

std::optional<Work> InFlight::take() {
  std::unique_lock lock(mutex_);
  return take_locked(lock);
}

std::optional<Work> InFlight::take_locked(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (stopping_) return std::nullopt;  // queued entries stay held; they are released at exit
    const auto next = next_runnable();
    if (next == ready_.end()) {
      ++idle_handlers_;
      if (reader_waiting_ && read_locked()) room_cv_.notify_all();  // an idle handler asks for work
      if (completer_waiting_ && !done_.empty() && flush_now(Clock::time_point{})) done_cv_.notify_one();
      work_cv_.wait(lock);
      --idle_handlers_;
      continue;
    }
    if (!gates_.empty() && gated(*next)) {
      ++gate_waiters_;
      gate_cv_.wait(lock);
      --gate_waiters_;
      // The wake-up came from the thread that lifted the gate, just before it calls its
      // handler, and on a busy machine it may have handed this thread its CPU: give that back,
      // or fast handlers here could drain the whole queue before the more important one starts.
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    Work w = std::move(*next);
    ready_.erase(next);
    suspects_ready_ -= w.suspect() ? 1 : 0;
    const auto it = held_.find(w.key);
    if (it == held_.end() || it->second.seq != w.seq || it->second.gone) {
      // Forgotten, delivered again since (that delivery's Work is the one to run), or its body
      // was deleted (the completer writes its dead-letter record, then forgets it).
      Metrics::add(metrics_.skipped, 1);
      continue;
    }
    if (it->second.lost) {  // another consumer owns it now: not ours to run
      held_.erase(it);
      room_freed();
      Metrics::add(metrics_.skipped, 1);
      continue;
    }
    // Less important entries wait behind it: they are not handed out before its handler is
    // called, whichever handler thread the OS runs first (strict level order).
    w.gates = by_level_ && !ready_.empty() && ready_.back().key.stream > w.key.stream;
    if (w.gates) gates_.push_back(w.key);
    it->second.state = w.suspect() ? State::taken : State::running;
    if (w.suspect()) {
      ++suspects_running_;
      last_chance_running_ = last_chance_running_ || last_chance(w);
    }
    ++running_;
    pace_.started(Clock::now());
    if (idle_handlers_ > 0 && next_runnable() != ready_.end()) work_cv_.notify_one();
    if (reader_waiting_ && read_locked()) room_cv_.notify_all();
    return w;
  }
}

StartVerdict InFlight::started(const EntryKey& key, std::int64_t counted_from) {
  {
    std::lock_guard lock(mutex_);
    const auto it = held_.find(key);
    if (it == held_.end() || it->second.lost || it->second.gone) return StartVerdict::skip;
    if (!stopping_) {
      it->second.state = State::running;
      return StartVerdict::run;
    }
    // Entries not yet started are not started once stopping, even when their start script
    // was on its way.
    lift_gate(key);
    it->second.state = State::queued;
    it->second.restore_count = counted_from;
    suspect_ended();
    --running_;
  }
  idle_cv_.notify_all();
  return StartVerdict::put_back;
}

void InFlight::not_run(const EntryKey& key, bool suspect) {
  {
    std::lock_guard lock(mutex_);
    lift_gate(key);
    // A gone entry stays until its dead-letter record is written (orphaned() forgets it).
    if (const auto it = held_.find(key); it != held_.end() && !it->second.gone) {
      held_.erase(it);
      room_freed();
    }
    Metrics::add(metrics_.skipped, 1);
    if (suspect) suspect_ended();
    --running_;
    if (completer_waiting_ && flush_now(Clock::now())) done_cv_.notify_one();
  }
  work_cv_.notify_one();  // the next suspect may go
  idle_cv_.notify_all();
}

void InFlight::entering(const Work& w, const std::shared_ptr<TaskControl>& control) {
  bool stop = false;
  StopWhy why = StopWhy::none;
  {
    std::lock_guard lock(mutex_);
    if (w.gates) lift_gate(w.key);
    if (const auto it = held_.find(w.key); it != held_.end() && it->second.seq == w.seq) {
      it->second.control = control;
      if (it->second.cancel) {
        stop = true;
        why = StopWhy::cancelled;
      }
    }
    if (stopping_ && !stop) {
      stop = true;
      why = StopWhy::shutdown;
    }
  }
  if (stop) control->request(why);
}

InFlight::Cancelled InFlight::cancel(std::uint16_t stream, const std::vector<std::string>& ids) {
  Cancelled noticed;
  {
    std::lock_guard lock(mutex_);
    for (const std::string& id : ids) {
      const auto it = held_.find(EntryKey{stream, id});
      if (it == held_.end() || it->second.state == State::finished) continue;
      if (it->second.control) {
        if (it->second.control->why() != StopWhy::cancelled) noticed.running.push_back(it->second.control);
      } else if (!it->second.cancel) {
        it->second.cancel = true;
        noticed.waiting.push_back({id, task_id_in(it->second.fields.get(), id)});
      }
    }
  }
  for (const auto& c : noticed.running) c->request(StopWhy::cancelled);
  return noticed;
}

std::vector<std::shared_ptr<TaskControl>> InFlight::running_controls() {
  std::vector<std::shared_ptr<TaskControl>> out;
  std::lock_guard lock(mutex_);
  for (const auto& [key, h] : held_) {
    if (h.control && h.state == State::running) out.push_back(h.control);
  }
  return out;
}

std::vector<std::shared_ptr<TaskControl>> InFlight::running_controls(std::uint16_t stream,
                                                                     const std::vector<std::string>& ids) {
  std::vector<std::shared_ptr<TaskControl>> out;
  std::lock_guard lock(mutex_);
  for (const auto& id : ids) {
    const auto it = held_.find(EntryKey{stream, id});
    if (it != held_.end() && it->second.control && it->second.state == State::running)
      out.push_back(it->second.control);
  }
  return out;
}

std::vector<std::pair<std::shared_ptr<TaskControl>, std::optional<Clock::time_point>>>
InFlight::running_leases() {
  std::vector<std::pair<std::shared_ptr<TaskControl>, std::optional<Clock::time_point>>> out;
  std::lock_guard lock(mutex_);
  for (const auto& [key, h] : held_) {
    if (!h.control || h.state != State::running) continue;
    out.emplace_back(h.control, leased_at(h));
  }
  return out;
}

std::optional<Clock::time_point> InFlight::lease_of(const EntryKey& key) {
  std::lock_guard lock(mutex_);
  const auto it = held_.find(key);
  return it == held_.end() ? std::nullopt : leased_at(it->second);
}

std::optional<Clock::time_point> InFlight::leased_at(const Held& h) {
  // Leased as due_for_lease() has it: an entry whose body went away is no longer leased (its
  // provisional record's note is renewed instead, and its handler's outcome decides).
  const bool leased = !h.lost && !h.gone && h.orphan_id.empty();
  return leased ? std::optional<Clock::time_point>(h.lease_at) : std::nullopt;
}

bool InFlight::give_up(Completion c, std::uint64_t seq) {
  {
    std::lock_guard lock(mutex_);
    const auto it = held_.find(c.key);
    if (it == held_.end() || it->second.seq != seq || it->second.state != State::running) return false;
    it->second.state = State::finished;
    it->second.fields.reset();
    done_.push_back(std::move(c));
  }
  done_cv_.notify_one();
  return true;
}

bool InFlight::gated(const Work& w) const {
  return std::any_of(gates_.begin(), gates_.end(),
                     [&](const EntryKey& k) { return k.stream < w.key.stream; });
}

void InFlight::lift_gate(const EntryKey& key) {
  const auto it = std::find(gates_.begin(), gates_.end(), key);
  if (it == gates_.end()) return;
  gates_.erase(it);
  if (gate_waiters_ > 0) gate_cv_.notify_all();
}

std::optional<Work> InFlight::finish_and_take(std::optional<Completion> done, bool suspect) {
  std::unique_lock lock(mutex_);
  finish_locked(std::move(done), suspect);
  return take_locked(lock);
}

void InFlight::finish(std::optional<Completion> done, bool suspect) {
  std::lock_guard lock(mutex_);
  finish_locked(std::move(done), suspect);
}

void InFlight::finish_locked(std::optional<Completion> done, bool suspect) {
  if (done) {
    Completion& c = *done;
    if (!gates_.empty()) lift_gate(c.key);  // its handler never ran (e.g. a rate limit put it back)
    if (const auto it = held_.find(c.key); it != held_.end()) {
      it->second.state = State::finished;
      it->second.fields.reset();  // no orphan record from now on; freed on this thread, not the fetcher's
      it->second.control.reset();
    }
    if (c.outcome == Outcome::ack && c.unique.key.empty() && !c.tracked && !c.cancelled && !c.tenant) {
      if (acks_.empty()) acks_since_ = Clock::now();
      acks_.push_back(std::move(c.key));
      if (unacked() == low_water_) room_cv_.notify_all();  // the fetcher may read (and ack) now
    } else {
      done_.push_back(std::move(c));
    }
  }
  if (suspect) {
    suspect_ended();
    if (idle_handlers_ > 0) work_cv_.notify_one();  // the next suspect may go
  }
  if (--running_ == 0) idle_cv_.notify_all();
  if (completer_waiting_ && !done_.empty() && flush_now(Clock::time_point{})) done_cv_.notify_one();
}

}  // namespace streamq::detail
