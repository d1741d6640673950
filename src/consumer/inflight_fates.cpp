// SPDX-License-Identifier: MIT
// The in-flight set, continued: the completer's and the lease keeper's side of it (what is
// written when, and what their findings do to held entries). See inflight.hpp.
#include "inflight.hpp"

#include <algorithm>
#include <iterator>

namespace streamq::detail {
namespace {

// Retries and dead letters wait at most this long for company while every handler is busy.
constexpr std::chrono::milliseconds kLinger{5};
// Successes wait this long for the fetcher (which writes them ahead of its next read) before
// the completer writes them itself: under load the fetcher comes back much sooner.
constexpr std::chrono::milliseconds kAckLinger{5};

}  // namespace

// ------------------------------------------------------------------ completer

bool InFlight::flush_now(Clock::time_point now) const {
  if (stopping_ || completer_stopping_) {
    return !done_.empty() || !acks_.empty() || !marks_.empty() || !reports_.empty();
  }
  // Successes: once the fetcher has left them for kAckLinger (pass a zero `now` to ask only
  // about the rest). The rest: once no more completions are coming (nothing runs or waits to
  // run), or a batch is worth a write on its own; otherwise they gather into bigger writes.
  // Start marks: as the rest. Reports: once due (they waited for their window already).
  if (!acks_.empty() && now - acks_since_ >= kAckLinger) return true;
  if (marks_.size() >= flush_batch_) return true;
  if (std::any_of(reports_.begin(), reports_.end(), [&](const auto& r) { return r.second <= now; }))
    return true;
  return !done_.empty() && (done_.size() >= flush_batch_ || (running_ == 0 && ready_.empty()));
}

bool InFlight::wait_completions(std::vector<Completion>& out, Writes& more, Clock::time_point until) {
  until = std::min(until, Clock::now() + std::chrono::minutes(1));  // never meet the clock's far end
  std::unique_lock lock(mutex_);
  completer_waiting_ = true;
  const auto linger_end = Clock::now() + kLinger;
  for (;;) {
    const auto now = Clock::now();
    if (flush_now(now) || now >= until) break;
    // Stopping: return at once, unless the caller holds writes to retry at `until`.
    if (completer_stopping_ && out.empty() && more.empty()) break;
    const bool lingering = !done_.empty() || !marks_.empty();
    if (lingering && now >= linger_end) break;
    auto wake = until;
    if (lingering) wake = std::min(wake, linger_end);
    // Successes are not announced (the fetcher takes them): while anything is held, look
    // every kAckLinger for ones it has left, e.g. while it is blocked on an empty stream.
    if (!acks_.empty()) {
      wake = std::min(wake, acks_since_ + kAckLinger);
    } else if (!held_.empty()) {
      wake = std::min(wake, now + kAckLinger);
    }
    for (const auto& r : reports_) wake = std::min(wake, r.second);
    done_cv_.wait_until(lock, wake);
  }
  completer_waiting_ = false;
  std::move(done_.begin(), done_.end(), std::back_inserter(out));
  done_.clear();
  for (EntryKey& k : acks_) out.push_back(Completion{std::move(k), Outcome::ack, {}});
  acks_.clear();
  std::move(marks_.begin(), marks_.end(), std::back_inserter(more.marks));
  marks_.clear();
  // Due reports; every one when stopping (the window no longer matters).
  const auto now = Clock::now();
  const bool all = stopping_ || completer_stopping_;
  std::erase_if(reports_, [&](auto& r) {
    if (!all && r.second > now) return false;
    more.reports.push_back(std::move(r.first));
    return true;
  });
  return !completer_stopping_;
}

void InFlight::mark_started(StartMark mark) {
  std::lock_guard lock(mutex_);
  marks_.push_back(std::move(mark));
  if (completer_waiting_ && flush_now(Clock::time_point{})) done_cv_.notify_one();
}

void InFlight::report_due(const std::shared_ptr<ReportBox>& box, Clock::time_point at) {
  {
    std::lock_guard lock(mutex_);
    const auto it =
        std::find_if(reports_.begin(), reports_.end(), [&](const auto& r) { return r.first == box; });
    if (it == reports_.end()) {
      reports_.emplace_back(box, at);
    } else {
      it->second = std::min(it->second, at);
    }
    if (!completer_waiting_) return;
  }
  done_cv_.notify_one();  // it recomputes when to wake
}

std::vector<FateInfo> InFlight::fates(const std::vector<Completion>& batch) {
  std::vector<FateInfo> out(batch.size());
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto it = held_.find(batch[i].key);
    if (it == held_.end()) continue;
    out[i].held = !it->second.lost;
    out[i].running = it->second.state == State::running || it->second.state == State::finished;
    out[i].orphan_id = it->second.orphan_id;
  }
  return out;
}

void InFlight::completed(const std::vector<EntryKey>& keys) {
  std::lock_guard lock(mutex_);
  for (const EntryKey& k : keys) held_.erase(k);
  room_freed();
}

bool InFlight::orphaned(const EntryKey& key, std::string orphan_id) {
  std::lock_guard lock(mutex_);
  const auto it = held_.find(key);
  if (it == held_.end()) return true;
  if (it->second.state == State::running || it->second.state == State::finished) {
    it->second.orphan_id = std::move(orphan_id);  // its own completion replaces the record
    return false;
  }
  held_.erase(it);  // never started: the record is its fate; take() and started() skip it
  room_freed();
  return true;
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

std::vector<std::string> InFlight::noted(std::uint16_t stream) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (const auto& [key, h] : held_) {
    if (key.stream == stream && !h.orphan_id.empty()) ids.push_back(key.id);
  }
  return ids;
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

std::vector<std::shared_ptr<const Fields>> InFlight::gone(std::uint16_t stream,
                                                          const std::vector<std::string>& ids) {
  std::vector<std::shared_ptr<const Fields>> out;
  out.reserve(ids.size());
  std::lock_guard lock(mutex_);
  for (const auto& id : ids) {
    const auto it = held_.find(EntryKey{stream, id});
    // No fields (an entry that came without a readable body): no record to write; it is
    // dead-lettered when its handler thread takes it.
    if (it == held_.end() || it->second.lost || it->second.gone || it->second.state == State::finished ||
        !it->second.fields) {
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
    if (h.state == State::queued && !h.lost && !h.gone) {
      out.push_back({key, h.origin == Origin::fresh ? 0 : h.restore_count});
    }
  }
  return out;
}

}  // namespace streamq::detail
