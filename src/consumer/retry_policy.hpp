// SPDX-License-Identifier: MIT
// The retry policy: what becomes of an entry after an attempt (ack, retry, or dead-letter
// with a reason), and the retry copy that decision writes (dead-letter entries are built by
// the Lua that writes them, src/lua/lib/fate.lua). Pure functions: no thread, no Redis;
// the executor asks, the completer writes.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "streamq/consumer_options.hpp"
#include "streamq/task.hpp"

namespace streamq::detail {

/// Values of the `reason` field of dead-letter entries.
namespace reason {
inline constexpr std::string_view retries_exhausted = "retries_exhausted";
inline constexpr std::string_view permanent = "permanent";
inline constexpr std::string_view malformed = "malformed";
inline constexpr std::string_view no_handler = "no_handler";
inline constexpr std::string_view body_lost = "body_lost";
inline constexpr std::string_view max_deliveries = "max_deliveries";
inline constexpr std::string_view bad_payload = "bad_payload";
inline constexpr std::string_view timeout = "timeout";    // HandlerOptions::timeout, retries exhausted
inline constexpr std::string_view deadline = "deadline";  // EnqueueOptions::deadline passed
}  // namespace reason

/// How an attempt ended, as the executor saw it.
enum class AttemptResult {
  succeeded,    // the handler returned
  failed,       // the handler threw (anything but PermanentError)
  permanent,    // the handler threw PermanentError
  bad_payload,  // the payload does not convert to the handler's type (BadPayloadError)
  malformed,    // the entry cannot be decoded: it never reached a handler
  no_handler,   // nobody handles its type
  body_lost,    // the entry has no body to run
};

struct Attempt {
  AttemptResult result = AttemptResult::succeeded;
  int retry_count = 0;  // the task's retries so far (only read for `failed`)
  int max_retries = 0;  // retries the task allows (only read for `failed`)
};

enum class Verdict { ack, retry, dead_letter };

struct Decision {
  Verdict verdict = Verdict::ack;
  std::string_view reason{};  // for dead_letter: one of the reason:: values
  bool operator==(const Decision&) const = default;
};

/// A success is acked; a failure is retried while retry_count < max_retries, then
/// dead-lettered (retries_exhausted); everything else is dead-lettered at once.
Decision decide(const Attempt& attempt) noexcept;

/// How long retry `retry_count` + 1 waits (see RetryBackoff): `unit` is a uniform random
/// number in [0, 1), used only with jitter. Never more than backoff.cap.
std::chrono::milliseconds retry_delay(const RetryBackoff& backoff, int retry_count, double unit) noexcept;

/// A uniform random number in [0, 1) from a per-thread generator.
double unit_random() noexcept;

/// The retry copy of an entry: all its fields, with retry_count set to `retry_count` + 1 and
/// last_error to `error` (added when missing).
Fields retry_copy(const Fields& original, int retry_count, std::string error);

}  // namespace streamq::detail
