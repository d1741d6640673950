// SPDX-License-Identifier: MIT
// A task checked and turned into what is written for it: its fields, its stream, its due time,
// its uniqueness lock, its retention and deadline (Producer::Impl::prepare, in prepare.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "wire/codec.hpp"

namespace streamq::detail {

/// A checked task and how the enqueue script is to write it.
struct Prepared {
  detail::NewTask task;
  std::int64_t dest = 1;      // KEYS index of its stream in the enqueue script: 1 normal, 2 high, 3 low
  std::int64_t at_ms = 0;     // run_at, ms since the epoch (0 = none)
  std::int64_t delay_ms = 0;  // delay (0 = none)
  std::string nonce;          // keeps equal delayed tasks apart in the delayed set
  std::string lock_key;       // its uniqueness lock, or empty
  std::int64_t lock_ms = 0;
  // EnqueueOptions::debounce: its state's key (empty = not debounced), window and mode as the
  // enqueue script's 'debounce' layout takes them.
  std::string debounce_key;
  std::int64_t debounce_ms = 0;
  std::string_view debounce_mode;
  int partition = 0;  // ProducerOptions::partitions
  // A tracked task's retention field ("<done ms> <dead ms>"), or empty. Not viewed by `task`
  // (a Prepared moves, and a short string with it): written_task() points at it.
  std::string retention;
  std::string deadline;  // EnqueueOptions::deadline, ms since the epoch, or empty (as retention)

  /// The task to write, with its retention and deadline.
  detail::NewTask written_task() const {
    detail::NewTask t = task;
    t.retention = retention;
    t.deadline = deadline;
    return t;
  }
};

}  // namespace streamq::detail
