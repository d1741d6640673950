// SPDX-License-Identifier: MIT
// streamq dashboard: the samples behind the charts. A thread of its own reads every queue's
// stats every --sample-interval and keeps the last hour; the API hands them out as series.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <streamq/inspector.hpp>

namespace streamq::cli::dashboard {

/// One queue at one moment, as the charts need it.
struct Sample {
  std::int64_t t_ms = 0;
  std::int64_t queued = 0;   ///< unfinished, not delivered
  std::int64_t pending = 0;  ///< delivered, not finished
  std::int64_t delayed = 0;
  std::int64_t dead = 0;
  /// Entries that have left the queue's streams (entries ever added minus those still there):
  /// done, retried, dead-lettered or cancelled. Unset when Redis cannot tell (< 7.0).
  std::optional<std::int64_t> left;
  /// Entries ever added to the dead-letter stream; unset when Redis cannot tell (< 7.0).
  std::optional<std::int64_t> dead_added;
  std::optional<std::int64_t> oldest_age_ms;
  std::optional<std::int64_t> oldest_pending_idle_ms;
};

/// Samples every discovered queue every `every` on its own Inspector (its own connection), and
/// keeps the last hour of each.
class Sampler {
 public:
  Sampler(const InspectorOptions& options, std::chrono::milliseconds every);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  /// The charts' series of `queue` (GET /api/queue's "series").
  nlohmann::json series(const std::string& queue) const;
  /// The last round's failure, or empty.
  std::string last_error() const;

 private:
  void run();
  void sample_once();

  Inspector inspector_;  // used by the sampling thread only
  const std::chrono::milliseconds every_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<std::string, std::deque<Sample>> samples_;
  std::string error_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace streamq::cli::dashboard
