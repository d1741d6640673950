// SPDX-License-Identifier: MIT
// The Consumer's counters (ConsumerMetrics), updated by the part that knows: the completer
// counts what it wrote, the fetcher and reclaimer what they took, the in-flight set what it
// skipped. Relaxed atomics: each counter is exact, a snapshot is not a consistent cut.
#pragma once

#include <atomic>
#include <cstdint>

#include "streamq/consumer_options.hpp"

namespace streamq::detail {

struct Metrics {
  std::atomic<std::uint64_t> done{0}, retried{0}, dead_lettered{0}, reclaimed{0}, replayed{0}, skipped{0},
      stale{0}, reconnects{0}, consumers_removed{0}, forwarded{0}, rate_limited{0}, cancelled{0},
      timed_out{0}, given_up{0}, handed_back{0};

  static void add(std::atomic<std::uint64_t>& counter, std::uint64_t n) noexcept {
    counter.fetch_add(n, std::memory_order_relaxed);
  }

  ConsumerMetrics snapshot() const noexcept {
    auto get = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
    return ConsumerMetrics{
        get(done),         get(retried),   get(dead_lettered), get(reclaimed),         get(replayed),
        get(skipped),      get(stale),     get(reconnects),    get(consumers_removed), get(forwarded),
        get(rate_limited), get(cancelled), get(timed_out),     get(given_up),          get(handed_back)};
  }
};

}  // namespace streamq::detail
