// SPDX-License-Identifier: MIT
// The in-flight set: the fetcher's and the reclaimer's side of it (what comes in, and when the
// next read may come), and its shutdown. The executor's side is in inflight_executor.cpp, the
// completer's and the lease keeper's in inflight_fates.cpp. See inflight.hpp.
#include "inflight.hpp"

#include <algorithm>
#include <functional>
#include <string_view>

#include "task_control.hpp"

namespace streamq::detail {

std::size_t EntryKeyHash::operator()(const EntryKey& k) const noexcept {
  return std::hash<std::string_view>{}(k.id) * 31 + k.stream;
}

InFlight::InFlight(std::size_t prefetch, Metrics& metrics, bool by_level, std::int64_t max_deliveries)
    : prefetch_(prefetch),
      by_level_(by_level),
      max_deliveries_(max_deliveries),
      low_water_(prefetch - std::max<std::size_t>(1, prefetch / 2)),
      flush_batch_(std::max<std::size_t>(1, prefetch / 4)),
      metrics_(metrics),
      pace_(prefetch) {
  held_.reserve(prefetch * 2);
}

// ------------------------------------------------------------------ fetcher and reclaimer

std::size_t InFlight::deliver(std::vector<Work>& works) {
  const auto now = Clock::now();
  std::size_t queued = 0;
  bool wake = false;
  bool wake_completer = false;
  {
    std::lock_guard lock(mutex_);
    wake_completer = held_.empty() && completer_waiting_;  // it starts looking for successes
    // Accepted while stopping too: entries read then are held unstarted, so they are released.
    for (Work& w : works) {
      Held h;
      h.lease_at = now;
      h.fields = w.fields;
      h.origin = w.origin;
      h.seq = w.seq = ++next_seq_;
      if (held_.try_emplace(w.key, std::move(h)).second) {
        suspects_ready_ += w.suspect() ? 1 : 0;
        if (!by_level_ || ready_.empty() || ready_.back().key.stream <= w.key.stream) {
          ready_.push_back(std::move(w));
        } else {
          // Behind its own level and ahead of every less important one (the queue stays sorted).
          const auto at =
              std::upper_bound(ready_.begin(), ready_.end(), w.key.stream,
                               [](std::uint16_t level, const Work& r) { return level < r.key.stream; });
          ready_.insert(at, std::move(w));
        }
        ++queued;
      }
    }
    wake = queued > 0 && idle_handlers_ > 0;
  }
  works.clear();
  // One handler is woken here; each handler that takes an entry wakes the next while work
  // remains (take_locked), so the wake-ups are not on the fetcher's path.
  if (wake) work_cv_.notify_one();
  if (wake_completer && queued > 0) done_cv_.notify_one();
  return queued;
}

bool InFlight::wait_for_room(const std::stop_token& stop) {
  std::unique_lock lock(mutex_);
  room_cv_.wait(lock, stop, [&] { return stopping_ || room_locked(); });
  return !stopping_ && !stop.stop_requested();
}

bool InFlight::wait_to_read(const std::stop_token& stop) {
  std::unique_lock lock(mutex_);
  reader_waiting_ = true;
  room_cv_.wait(lock, stop, [&] { return stopping_ || read_locked(); });
  reader_waiting_ = false;
  return !stopping_ && !stop.stop_requested();
}

std::size_t InFlight::take_acks(std::vector<EntryKey>& out, std::size_t reserved, bool ahead) {
  std::lock_guard lock(mutex_);
  bool for_completer = false;
  for (EntryKey& k : acks_) {
    const auto it = held_.find(k);
    if (it != held_.end() && (it->second.gone || !it->second.orphan_id.empty())) {
      done_.push_back(Completion{std::move(k), Outcome::ack, {}});
      for_completer = true;
    } else {
      out.push_back(std::move(k));
    }
  }
  acks_.clear();
  if (for_completer) done_cv_.notify_one();
  // Half the prefetch per read, so that the next read fits beside the batch in hand: the
  // handlers run one batch while Redis serves the next read.
  const std::size_t after = (held_.size() > out.size() ? held_.size() - out.size() : 0) + reserved;
  const std::size_t batch = prefetch_ - low_water_;
  std::size_t room = after < prefetch_ ? std::min(prefetch_ - after, batch) : 0;
  // And no more than the handlers would start within StartPace::kHorizon.
  pace_.refresh(Clock::now());
  const std::size_t waiting = fresh_ready() + reserved;
  const std::size_t allowed = may_wait();
  room = std::min(room, allowed > waiting ? allowed - waiting : 0);
  if (ahead && room < std::min(batch, std::max<std::size_t>(1, allowed / 2))) room = 0;
  return room;
}

void InFlight::acks_written(const std::vector<EntryKey>& keys) { completed(keys); }

void InFlight::acks_refused(std::vector<EntryKey>& keys) {
  {
    std::lock_guard lock(mutex_);
    for (EntryKey& k : keys) done_.push_back(Completion{std::move(k), Outcome::ack, {}});
  }
  keys.clear();
  done_cv_.notify_one();
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

// ------------------------------------------------------------------ shutdown

void InFlight::stop() {
  std::vector<std::shared_ptr<TaskControl>> running;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (const auto& [key, h] : held_) {
      if (h.control) running.push_back(h.control);
    }
  }
  // Outside the lock: a handler's own stop_callback runs here.
  for (const auto& c : running) c->request(StopWhy::shutdown);
  work_cv_.notify_all();
  gate_cv_.notify_all();
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

std::size_t InFlight::running() {
  std::lock_guard lock(mutex_);
  return running_;
}

std::size_t InFlight::idle_handlers() {
  std::lock_guard lock(mutex_);
  return idle_handlers_;
}

std::size_t InFlight::held_count() {
  std::lock_guard lock(mutex_);
  return held_.size();
}

void InFlight::room_freed() {
  if (unacked() <= low_water_) room_cv_.notify_all();
}

}  // namespace streamq::detail
