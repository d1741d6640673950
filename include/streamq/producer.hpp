// SPDX-License-Identifier: MIT
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "streamq/options.hpp"

namespace streamq {

/// Per-task options for Producer::enqueue.
struct EnqueueOptions {
  /// Caller-given task id (an idempotency key you can retry with); empty = a new UUID v4.
  std::string task_id{};
  /// Retries allowed after the first attempt; unset = ProducerOptions::default_max_retries.
  std::optional<int> max_retries{};
  /// Extra fields written after the standard ones and carried through retries and the
  /// dead-letter stream (for example "priority"). Names must not collide with wire fields.
  std::vector<std::pair<std::string, std::string>> extra_fields{};
};

/// One task of a batch for Producer::enqueue_batch.
struct TaskSpec {
  std::string task_type{};
  /// JSON text.
  std::string payload{};
  EnqueueOptions options{};
};

/// Enqueues tasks on one Redis stream.
///
/// @code
///   streamq::Producer producer({.connection = {.url = "redis://127.0.0.1:6379"},
///                               .stream = "task_queue"});
///   std::string id = producer.enqueue("send_email", {{"to", "user@example.com"}});
/// @endcode
///
/// Thread safety: one Producer owns one connection; calls on the same Producer must not
/// overlap (use one Producer per thread, or your own mutex). Movable, not copyable.
class Producer {
 public:
  /// Validates the options (ConfigError names the bad field). Connects lazily, on the first
  /// enqueue, so a Producer can be built while Redis is still starting.
  explicit Producer(ProducerOptions options = {});
  ~Producer();
  Producer(Producer&&) noexcept;
  Producer& operator=(Producer&&) noexcept;
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  /// Enqueues one task and returns its task id. `payload_json` must be JSON text.
  /// One round trip: EVALSHA of the reject script (Overflow::reject) or
  /// `XADD <stream> MAXLEN ~ <max_len> * ...` (Overflow::trim_oldest).
  /// @throws PayloadError (too large, not JSON, too deep; nothing sent), QueueFullError,
  ///   ConfigError (bad task type, id or extra field), ReplyError (e.g. WRONGTYPE, OOM,
  ///   NOPERM), ConnectionError / TimeoutError (the outcome is unknown: retry with the
  ///   same task id).
  std::string enqueue(std::string_view task_type, std::string_view payload_json,
                      const EnqueueOptions& options = {});

  /// Same, serialising a JSON value (any JSON value, as the seed's json.dumps allows):
  /// `producer.enqueue("send_email", nlohmann::json{{"to", "a@b.c"}})`. A template so that a
  /// string literal payload picks the JSON-text overload above.
  template <class Json, std::enable_if_t<std::is_same_v<Json, nlohmann::json>, int> = 0>
  std::string enqueue(std::string_view task_type, const Json& payload,
                      const EnqueueOptions& options = {}) {
    const std::string text = payload.dump();
    return enqueue(task_type, std::string_view(text), options);
  }

  /// Enqueues many tasks in one pipeline and returns their ids in the order given. Every
  /// payload is validated before anything is sent. With Overflow::reject the tasks are
  /// written in chunks of up to 64 per script call, each chunk all-or-nothing (it fits in
  /// the remaining capacity or none of it is written); when a chunk is refused the call
  /// throws QueueFullError whose batch_ids() says which tasks were written.
  /// @throws as enqueue.
  std::vector<std::string> enqueue_batch(const std::vector<TaskSpec>& tasks);

  /// The options this producer runs with.
  const ProducerOptions& options() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamq
