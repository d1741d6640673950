// SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "streamq/export.hpp"

namespace streamq {

/// Root of every exception streamq throws.
class STREAMQ_EXPORT Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The connection to Redis failed: refused, reset, closed, or unreachable within the
/// connect timeout. The connection is dropped and rebuilt (with backoff) on the next call.
/// The outcome of a write that was in flight is unknown: a retried enqueue should reuse its
/// task id.
class STREAMQ_EXPORT ConnectionError : public Error {
 public:
  using Error::Error;
};

/// A command got no answer within the socket timeout. Same consequences as ConnectionError.
class STREAMQ_EXPORT TimeoutError : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

/// Redis answered with an error reply. prefix() is the server's error code, the first word
/// of the reply: "NOGROUP", "WRONGTYPE", "OOM", "NOPERM", "WRONGPASS", "ERR", ...
/// An error inside one of streamq's scripts has the same code on every server: Redis 6.2
/// wraps it ("ERR Error running script (call to f_...): @user_script:3: WRONGTYPE ..."), and
/// prefix() is the wrapped code ("WRONGTYPE"); what() is the server's text unchanged.
/// The connection stays usable.
class STREAMQ_EXPORT ReplyError : public Error {
 public:
  /// what() is the server's message; an error raised inside a script, which Redis 6.2 wraps
  /// (`ERR Error running script (call to f_<sha>): @user_script:<line>: <error>`), is
  /// unwrapped to <error>, as Redis 7 reports it.
  explicit ReplyError(const std::string& server_message);
  /// The server's error code ("WRONGTYPE", "OOM", ...): the first word of its message, or
  /// of the error a Redis 6.2 script error wraps.
  const std::string& prefix() const noexcept { return prefix_; }

 private:
  std::string prefix_;
};

/// An option or URL is invalid. The message names the field.
class STREAMQ_EXPORT ConfigError : public Error {
 public:
  using Error::Error;
};

/// Base of the refusals of an enqueue: nothing of a refused task was written.
/// From enqueue_batch, batch_ids() has one slot per task of the batch, in order: the id of
/// each task that was written, an empty string for each refused one. The written tasks are
/// always the first accepted() of the batch (of each partition's tasks, with
/// ProducerOptions::partitions > 1), and what() says which indices were refused.
class STREAMQ_EXPORT EnqueueRefusedError : public Error {
 public:
  explicit EnqueueRefusedError(const std::string& what, std::vector<std::string> batch_ids = {})
      : Error(what), batch_ids_(std::move(batch_ids)) {}
  /// Per-task ids of the batch (empty strings for refused tasks); empty for a single enqueue.
  const std::vector<std::string>& batch_ids() const noexcept { return batch_ids_; }
  /// How many tasks of the batch were written.
  std::size_t accepted() const noexcept {
    std::size_t n = 0;
    for (const auto& id : batch_ids_) n += id.empty() ? 0 : 1;
    return n;
  }

 private:
  std::vector<std::string> batch_ids_;
};

/// The queue's unfinished backlog (the task streams of every priority plus the delayed set)
/// reached ProducerOptions::max_len and the overflow policy is Overflow::reject.
class STREAMQ_EXPORT QueueFullError : public EnqueueRefusedError {
 public:
  using EnqueueRefusedError::EnqueueRefusedError;
};

/// A task of a batch (EnqueueOptions::batch) was refused: its batch is closed (or was never
/// opened, or its counts expired). From enqueue_batch, batch_ids() is as for QueueFullError.
/// Also thrown by Producer::open_batch for a parent batch that is not open.
class STREAMQ_EXPORT BatchClosedError : public EnqueueRefusedError {
 public:
  using EnqueueRefusedError::EnqueueRefusedError;
};

/// A task with EnqueueOptions::unique_for was refused: a task with the same unique key was
/// enqueued within its window and has not finished (or been dead-lettered) yet.
/// existing_task_id() is the task id holding the key; from enqueue_batch, index() is the
/// refused task's index in the batch (0 for a single enqueue), and batch_ids() is as for
/// QueueFullError.
class STREAMQ_EXPORT DuplicateTaskError : public EnqueueRefusedError {
 public:
  DuplicateTaskError(const std::string& what, std::string existing_task_id, std::size_t index = 0,
                     std::vector<std::string> batch_ids = {})
      : EnqueueRefusedError(what, std::move(batch_ids)),
        existing_task_id_(std::move(existing_task_id)),
        index_(index) {}
  const std::string& existing_task_id() const noexcept { return existing_task_id_; }
  std::size_t index() const noexcept { return index_; }

 private:
  std::string existing_task_id_;
  std::size_t index_ = 0;
};

/// The tasks were written to the master, but fewer replicas than
/// ProducerOptions::min_replicas_acked acknowledged them within replicas_ack_timeout. They are
/// queued and will run unless the master fails before a replica copies them, in which case they
/// are lost. Enqueuing them again with the same task ids trades that risk for a likely second
/// run (a slow replica usually catches up): the copy is recognisable by its task_id, so a
/// handler can skip it. (With EnqueueOptions::unique_for the copy is refused as a duplicate,
/// which confirms nothing.)
class STREAMQ_EXPORT ReplicationError : public Error {
 public:
  ReplicationError(const std::string& what, std::vector<std::string> task_ids, std::int64_t acknowledged,
                   int required)
      : Error(what), task_ids_(std::move(task_ids)), acknowledged_(acknowledged), required_(required) {}
  /// The ids of the tasks written (one for enqueue, every one of the batch for enqueue_batch).
  const std::vector<std::string>& task_ids() const noexcept { return task_ids_; }
  /// Replicas that acknowledged the writes (WAIT's answer), and how many were asked for.
  std::int64_t acknowledged() const noexcept { return acknowledged_; }
  int required() const noexcept { return required_; }

 private:
  std::vector<std::string> task_ids_;
  std::int64_t acknowledged_ = 0;
  int required_ = 0;
};

/// A payload was refused before anything was sent: larger than the size cap, not JSON, or
/// nested deeper than the depth cap.
class STREAMQ_EXPORT PayloadError : public Error {
 public:
  using Error::Error;
};

/// Producer::enqueue: a producer middleware returned without calling next(), so nothing was
/// written (see Producer::use).
class STREAMQ_EXPORT MiddlewareError : public Error {
 public:
  using Error::Error;
};

/// Thrown by a handler to say "do not retry": the task goes to the dead-letter stream at
/// once, with this message as its error.
class STREAMQ_EXPORT PermanentError : public Error {
 public:
  using Error::Error;
};

/// Thrown by a handler to have the task retried after `delay` rather than after the backoff
/// the consumer would choose (for a server's Retry-After, a rate limit, a lock held
/// elsewhere). It counts as an attempt: a task with no retries left is dead-lettered
/// (reason retries_exhausted) with this message as its error. A negative delay counts as 0.
///
/// @code
///   consumer.on("call_api", [](const streamq::Task& task) {
///     const HttpResult r = call_api(task.payload());
///     if (r.status == 429) throw streamq::RetryAfter(std::chrono::seconds(r.retry_after_s), "rate limited");
///   });
/// @endcode
class STREAMQ_EXPORT RetryAfter : public Error {
 public:
  RetryAfter(std::chrono::milliseconds delay, const std::string& what)
      : Error(what), delay_(delay < std::chrono::milliseconds(0) ? std::chrono::milliseconds(0) : delay) {}
  std::chrono::milliseconds delay() const noexcept { return delay_; }

 private:
  std::chrono::milliseconds delay_;
};

/// A task's payload does not convert to the type its handler takes (Consumer::on<T>: the
/// nlohmann from_json threw). The task goes to the dead-letter stream at once with reason
/// `bad_payload` and this message (the conversion error) as its error: retrying cannot fix
/// it. A handler may throw it too, for a payload it finds unusable.
class STREAMQ_EXPORT BadPayloadError : public PermanentError {
 public:
  using PermanentError::PermanentError;
};

}  // namespace streamq
