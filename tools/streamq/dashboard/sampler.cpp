// SPDX-License-Identifier: MIT
#include "dashboard/sampler.hpp"

#include <algorithm>
#include <vector>

namespace streamq::cli::dashboard {
namespace {

using json = nlohmann::json;

constexpr std::int64_t hour_ms = 3'600'000;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Sample sample_of(const QueueStats& s, std::int64_t t_ms) {
  Sample x;
  x.t_ms = t_ms;
  x.pending = s.pending_total;
  x.queued = std::max<std::int64_t>(0, s.length - s.pending_total);
  x.delayed = s.delayed;
  x.dead = s.dlq_length;
  // Redis < 7.0 reports no entries-added (0). On 7.0 and later a stream that ever held an entry
  // reports more than 0, and one that never did (a level a worker created with MKSTREAM) 0,
  // exactly. So the levels' sum is known once it is above 0; when it is 0, this is either
  // Redis 6.2 or a queue never used: no rates rather than false zeros. A dead-letter stream
  // that is empty or missing had nothing to count since it was last purged.
  if (s.dlq_entries_added > 0 || s.dlq_length == 0) x.dead_added = s.dlq_entries_added;
  std::int64_t added = 0;
  for (const LevelStats& l : s.levels) {
    if (!l.exists) continue;
    added += l.entries_added;
    if (l.oldest_entry_age_ms)
      x.oldest_age_ms = std::max(x.oldest_age_ms.value_or(0), *l.oldest_entry_age_ms);
  }
  if (added > 0) x.left = added - s.length;
  for (const GroupInfo& g : s.groups) {
    if (g.oldest_pending_idle_ms) {
      x.oldest_pending_idle_ms = std::max(x.oldest_pending_idle_ms.value_or(0), *g.oldest_pending_idle_ms);
    }
  }
  return x;
}

json optional_json(const std::optional<std::int64_t>& v) { return v ? json(*v) : json(nullptr); }

/// At most this many points per chart line: the samples of an hour are thinned to it.
constexpr std::size_t max_points = 720;

/// The charts' series of one queue: levels as they were, and the rates between the samples
/// shown (every k-th, the newest always among them, when there are more than max_points).
json series_json(const std::deque<Sample>& all) {
  std::vector<const Sample*> samples;
  const std::size_t step = all.empty() ? 1 : (all.size() + max_points - 1) / max_points;
  for (std::size_t i = all.empty() ? 0 : (all.size() - 1) % step; i < all.size(); i += step) {
    samples.push_back(&all[i]);
  }
  json t = json::array(), queued = json::array(), pending = json::array(), delayed = json::array(),
       dead = json::array(), done_rate = json::array(), dead_rate = json::array(), age = json::array(),
       idle = json::array();
  const Sample* previous = nullptr;
  for (const Sample* sample : samples) {
    const Sample& s = *sample;
    t.push_back(s.t_ms);
    queued.push_back(s.queued);
    pending.push_back(s.pending);
    delayed.push_back(s.delayed);
    dead.push_back(s.dead);
    age.push_back(optional_json(s.oldest_age_ms));
    idle.push_back(optional_json(s.oldest_pending_idle_ms));
    std::optional<double> died_per_s;
    std::optional<double> done_per_s;
    if (previous != nullptr && s.t_ms > previous->t_ms && s.dead_added && previous->dead_added) {
      const double seconds = static_cast<double>(s.t_ms - previous->t_ms) / 1000.0;
      // A purge restarts the dead-letter stream's count: what it holds now came since.
      const std::int64_t died =
          *s.dead_added >= *previous->dead_added ? *s.dead_added - *previous->dead_added : *s.dead_added;
      died_per_s = static_cast<double>(died) / seconds;
      if (s.left && previous->left) {
        // Dead-lettering takes an entry out of the stream too; what else left was done or retried.
        done_per_s =
            static_cast<double>(std::max<std::int64_t>(0, *s.left - *previous->left - died)) / seconds;
      }
    }
    dead_rate.push_back(died_per_s ? json(*died_per_s) : json(nullptr));
    done_rate.push_back(done_per_s ? json(*done_per_s) : json(nullptr));
    previous = sample;
  }
  return {{"t_ms", t},
          {"queued", queued},
          {"pending", pending},
          {"delayed", delayed},
          {"dead", dead},
          {"done_per_s", done_rate},
          {"dead_per_s", dead_rate},
          {"oldest_age_ms", age},
          {"oldest_pending_idle_ms", idle}};
}

}  // namespace

Sampler::Sampler(const InspectorOptions& options, std::chrono::milliseconds every)
    : inspector_(options), every_(every), thread_([this] { run(); }) {}

Sampler::~Sampler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

json Sampler::series(const std::string& queue) const {
  std::lock_guard lock(mutex_);
  const auto it = samples_.find(queue);
  return series_json(it == samples_.end() ? std::deque<Sample>{} : it->second);
}

std::string Sampler::last_error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void Sampler::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    lock.unlock();
    sample_once();
    lock.lock();
    wake_.wait_for(lock, every_, [this] { return stop_; });
  }
}

/// One round: every queue found, each on its own (one that cannot be read does not cost the
/// others their sample); the last failure is what the page shows.
void Sampler::sample_once() {
  std::vector<std::pair<std::string, Sample>> taken;
  std::string error;
  try {
    for (const QueueInfo& q : inspector_.queues()) {
      try {
        taken.emplace_back(q.name, sample_of(inspector_.stats(q.name), now_ms()));
      } catch (const std::exception& e) {
        error = q.name + ": " + e.what();
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::int64_t oldest = now_ms() - hour_ms;
  std::lock_guard lock(mutex_);
  for (auto& [name, sample] : taken) samples_[name].push_back(sample);
  for (auto it = samples_.begin(); it != samples_.end();) {
    std::deque<Sample>& d = it->second;
    while (!d.empty() && d.front().t_ms < oldest) d.pop_front();
    it = d.empty() ? samples_.erase(it) : std::next(it);
  }
  error_ = error;
}

}  // namespace streamq::cli::dashboard
