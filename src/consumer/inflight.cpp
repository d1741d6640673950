// SPDX-License-Identifier: MIT
#include "inflight.hpp"

#include <algorithm>
#include <functional>
#include <string_view>

namespace streamq::detail {
namespace {

// Completions wait at most this long for company while every handler is busy.
constexpr std::chrono::milliseconds kLinger{5};

}  // namespace

std::size_t EntryKeyHash::operator()(const EntryKey& k) const noexcept {
  return std::hash<std::string_view>{}(k.id) * 31 + k.stream;
}

InFlight::InFlight(std::size_t prefetch, Metrics& metrics)
    : prefetch_(prefetch),
      low_water_(prefetch - std::max<std::size_t>(1, prefetch / 2)),
      flush_batch_(std::max<std::size_t>(1, prefetch / 4)),
      metrics_(metrics) {
  held_.reserve(prefetch * 2);
}

// ------------------------------------------------------------------ fetcher and reclaimer

std::size_t InFlight::deliver(std::vector<Work>& works) {
  const auto now = Clock::now();
  std::size_t queued = 0;
  std::size_t wake = 0;
  {
    std::lock_guard lock(mutex_);
    // Accepted while stopping too: entries read then are held unstarted, so they are released.
    for (Work& w : works) {
      Held h;
      h.lease_at = now;
      h.fields = w.fields;
      h.origin = w.origin;
      h.seq = w.seq = ++next_seq_;
      if (held_.try_emplace(w.key, std::move(h)).second) {
        ready_.push_back(std::move(w));
        ++queued;
      }
    }
    wake = std::min(queued, idle_handlers_);
  }
  works.clear();
  if (wake > 0 && wake == queued) {
    work_cv_.notify_all();
  } else {
    for (std::size_t i = 0; i < wake; ++i) work_cv_.notify_one();
  }
  return queued;
}

std::size_t InFlight::wait_for_room(const std::stop_token& stop) {
  std::unique_lock lock(mutex_);
  room_cv_.wait(lock, stop, [&] { return stopping_ || held_.size() <= low_water_; });
  return stopping_ || stop.stop_requested() ? 0 : prefetch_ - held_.size();
}

std::size_t InFlight::reclaim_room(std::size_t cap) {
  std::lock_guard lock(mutex_);
  if (stopping_ || held_.size() >= prefetch_) return 0;
  if (std::any_of(ready_.begin(), ready_.end(), [](const Work& w) { return w.suspect(); })) return 0;
  return std::min(cap, prefetch_ - held_.size());
}

std::vector<std::string> InFlight::held_ids(std::uint16_t stream) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  ids.reserve(held_.size());
  for (const auto& [key, h] : held_) {
    if (key.stream == stream) ids.push_back(key.id);
  }
  return ids;
}

// ------------------------------------------------------------------ executor

std::deque<Work>::iterator InFlight::next_runnable() {
  if (!suspect_running_) return ready_.begin();
  return std::find_if(ready_.begin(), ready_.end(), [](const Work& w) { return !w.suspect(); });
}

std::optional<Work> InFlight::take() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (stopping_) return std::nullopt;  // queued entries stay held; they are released at exit
    const auto next = next_runnable();
    if (next == ready_.end()) {
      ++idle_handlers_;
      if (completer_waiting_ && flush_now()) done_cv_.notify_one();
      work_cv_.wait(lock);
      --idle_handlers_;
      continue;
    }
    Work w = std::move(*next);
    ready_.erase(next);
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
    it->second.state = w.suspect() ? State::taken : State::running;
    suspect_running_ = suspect_running_ || w.suspect();
    ++running_;
    return w;
  }
}

bool InFlight::started(const EntryKey& key) {
  std::lock_guard lock(mutex_);
  const auto it = held_.find(key);
  if (it == held_.end() || it->second.lost || it->second.gone) return false;
  it->second.state = State::running;
  return true;
}

void InFlight::not_run(const EntryKey& key, bool suspect) {
  {
    std::lock_guard lock(mutex_);
    // A gone entry stays until its dead-letter record is written (orphaned() forgets it).
    if (const auto it = held_.find(key); it != held_.end() && !it->second.gone) {
      held_.erase(it);
      room_freed();
    }
    Metrics::add(metrics_.skipped, 1);
    if (suspect) suspect_running_ = false;
    --running_;
  }
  work_cv_.notify_one();  // the next suspect may go
  idle_cv_.notify_all();
}

void InFlight::finish(Completion c, bool suspect) {
  bool wake_completer = false;
  {
    std::lock_guard lock(mutex_);
    done_.push_back(std::move(c));
    if (suspect) suspect_running_ = false;
    --running_;
    wake_completer = completer_waiting_ && flush_now();
  }
  if (wake_completer) done_cv_.notify_one();
  if (suspect) work_cv_.notify_one();
  idle_cv_.notify_all();
}

// ------------------------------------------------------------------ completer

bool InFlight::flush_now() const {
  if (done_.empty()) return false;
  // Write at once unless every handler is busy with more work waiting: then completions
  // gather into bigger writes (kLinger bounds the wait).
  return done_.size() >= flush_batch_ || idle_handlers_ > 0 || ready_.empty() || stopping_ ||
         completer_stopping_;
}

bool InFlight::wait_completions(std::vector<Completion>& out, Clock::time_point until) {
  until = std::min(until, Clock::now() + std::chrono::minutes(1));  // never meet the clock's far end
  std::unique_lock lock(mutex_);
  completer_waiting_ = true;
  while (!flush_now() && !(completer_stopping_ && done_.empty())) {
    const auto wake = done_.empty() ? until : std::min(until, Clock::now() + kLinger);
    if (done_cv_.wait_until(lock, wake) == std::cv_status::timeout && Clock::now() >= wake) break;
  }
  completer_waiting_ = false;
  if (out.empty()) {
    out.swap(done_);
  } else {
    std::move(done_.begin(), done_.end(), std::back_inserter(out));
    done_.clear();
  }
  return !completer_stopping_;
}

std::vector<FateInfo> InFlight::fates(const std::vector<Completion>& batch) {
  std::vector<FateInfo> out(batch.size());
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto it = held_.find(batch[i].key);
    if (it == held_.end()) continue;
    out[i].held = !it->second.lost;
    out[i].running = it->second.state == State::running;
    out[i].orphan_id = it->second.orphan_id;
  }
  return out;
}

void InFlight::completed(const std::vector<EntryKey>& keys) {
  std::lock_guard lock(mutex_);
  for (const EntryKey& k : keys) held_.erase(k);
  room_freed();
}

void InFlight::orphaned(const EntryKey& key, std::string orphan_id) {
  std::lock_guard lock(mutex_);
  const auto it = held_.find(key);
  if (it == held_.end()) return;
  if (it->second.state == State::running) {
    it->second.orphan_id = std::move(orphan_id);  // its own completion replaces the record
  } else {
    held_.erase(it);  // never started: the record is its fate; take() and started() skip it
    room_freed();
  }
}

void InFlight::stop_completer() {
  {
    std::lock_guard lock(mutex_);
    completer_stopping_ = true;
  }
  done_cv_.notify_all();
}

void InFlight::push(Completion c) {
  {
    std::lock_guard lock(mutex_);
    done_.push_back(std::move(c));
  }
  done_cv_.notify_one();
}

// ------------------------------------------------------------------ lease keeper

std::vector<std::string> InFlight::due_for_lease(std::uint16_t stream, Clock::time_point due) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (const auto& [key, h] : held_) {
    if (key.stream == stream && !h.lost && !h.gone && h.orphan_id.empty() && h.lease_at <= due) {
      ids.push_back(key.id);
    }
  }
  return ids;
}

void InFlight::renewed(std::uint16_t stream, const std::vector<std::string>& ids, Clock::time_point at) {
  std::lock_guard lock(mutex_);
  for (const auto& id : ids) {
    if (const auto it = held_.find(EntryKey{stream, id}); it != held_.end()) it->second.lease_at = at;
  }
}

std::size_t InFlight::lost(std::uint16_t stream, const std::vector<std::string>& ids) {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& id : ids) {
    const auto it = held_.find(EntryKey{stream, id});
    if (it != held_.end() && !it->second.lost) {
      it->second.lost = true;
      ++n;
    }
  }
  return n;
}

std::vector<std::shared_ptr<const Fields>> InFlight::gone(std::uint16_t stream, const std::vector<std::string>& ids) {
  std::vector<std::shared_ptr<const Fields>> out;
  out.reserve(ids.size());
  std::lock_guard lock(mutex_);
  for (const auto& id : ids) {
    const auto it = held_.find(EntryKey{stream, id});
    if (it == held_.end() || it->second.lost || it->second.gone) {
      out.emplace_back();
      continue;
    }
    it->second.gone = true;
    out.push_back(it->second.fields);
  }
  return out;
}

std::vector<Unstarted> InFlight::unstarted() {
  std::lock_guard lock(mutex_);
  std::vector<Unstarted> out;
  for (const auto& [key, h] : held_) {
    if (h.state == State::queued && !h.lost && !h.gone) out.push_back({key, h.origin == Origin::fresh});
  }
  return out;
}

// ------------------------------------------------------------------ shutdown

void InFlight::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  room_cv_.notify_all();
  done_cv_.notify_all();
}

bool InFlight::wait_idle(Clock::time_point until) {
  std::unique_lock lock(mutex_);
  idle_cv_.wait_until(lock, until, [&] { return running_ == 0 || idle_wait_ended_; });
  return running_ == 0;
}

void InFlight::end_idle_wait() {
  {
    std::lock_guard lock(mutex_);
    idle_wait_ended_ = true;
  }
  idle_cv_.notify_all();
}

std::size_t InFlight::held_count() {
  std::lock_guard lock(mutex_);
  return held_.size();
}

void InFlight::room_freed() {
  if (held_.size() <= low_water_) room_cv_.notify_all();
}

}  // namespace streamq::detail
