// SPDX-License-Identifier: MIT
// Producer's state, and its member functions' places: producer.cpp (the facade and the waits),
// prepare.cpp, batch.cpp and replication.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prepare.hpp"
#include "redis/argv.hpp"
#include "redis/connection.hpp"
#include "redis/scripts.hpp"
#include "streamq/producer.hpp"
#include "waiter.hpp"
#include "wire/keys.hpp"

namespace streamq {

struct Producer::Impl {
  // producer.cpp
  explicit Impl(ProducerOptions o);
  static std::string first_partition(const ProducerOptions& o);
  std::string enqueue_one(std::string_view task_type, std::string_view payload_json,
                          const EnqueueOptions& task_options);
  /// The waits' follower of the queue's events, made on the first wait.
  detail::Waiter& waiter();
  /// A wait on this thread: its outcome, turned into the record or an exception here. The waiter
  /// settles it by its deadline even while Redis is away (its deadline keeper).
  TaskRecord wait_here(const std::string& task_id, std::chrono::milliseconds timeout,
                       std::optional<std::size_t> partition, const WaitOptions& options);

  // prepare.cpp
  /// The partition of a task: by its partition key, else its unique key, else the next in turn.
  int partition_of(const EnqueueOptions& eo, std::string_view unique_key);
  /// Checks one task and its per-call options; throws before anything is sent.
  detail::Prepared prepare(std::string_view type, std::string_view payload, const EnqueueOptions& eo,
                           std::string& id_storage, std::string_view created_at);
  /// XADD <stream> MAXLEN ~ <max_len> * fields... (the seed's command).
  detail::Argv trim_argv(const detail::Prepared& p) const;
  /// One enqueue script call for tasks [first, last), all of one partition; `refusal_mark` (the
  /// batch's in that partition, see the enqueue script) is empty for a call that is a whole batch.
  /// `refusal_mark` (with `position`, the chunk's 1-based place among its partition's chunks):
  /// the batch's mark, for a partition sent in more than one chunk (see the enqueue script).
  detail::Argv script_argv(const std::vector<detail::Prepared>& tasks, std::size_t first, std::size_t last,
                           const std::string& refusal_mark = {}, std::int64_t position = 0) const;
  /// Whether a task needs the enqueue script even with Overflow::trim_oldest, and the
  /// script's 'full' layout (see enqueue.lua).
  static bool needs_script(const detail::Prepared& t);

  // batch.cpp
  std::vector<std::string> enqueue_many(const std::vector<TaskSpec>& tasks);
  /// A batch some of whose commands Redis refused with `failure` (OOM, WRONGTYPE, a redirection
  /// that outlasted the retries, ...): that ReplyError, and when some tasks were written (`ids`,
  /// "" for the others) its message says which.
  [[noreturn]] void refuse_batch(const std::vector<std::string>& ids, const std::string& failure);

  // replication.cpp
  /// WAIT for min_replicas_acked replicas to have what this connection wrote (with a cluster
  /// URL: on every master it wrote to, at the same time); how many did, the fewest of those
  /// masters'. A server that has just turned replica refuses WAIT: none did (with a sentinel URL
  /// the connection is dropped, so the next call asks the sentinels again).
  std::int64_t replicas_acknowledging();
  /// For a batch refused part-way (`ids`: the written ones, "" for the others): with
  /// min_replicas_acked, what the replicas acknowledged of the written part, for the refusal's
  /// message ("" when nothing was written, or the option is off).
  std::string replication_of_written(const std::vector<std::string>& ids);
  /// With min_replicas_acked: WAIT for the replicas to have what this connection wrote (the
  /// tasks `ids`, just written), and ReplicationError when too few did in time.
  void wait_for_replicas(const std::vector<std::string>& ids);

  ProducerOptions options;
  std::vector<ProducerMiddleware> middleware;  // Producer::use
  detail::Connection conn;
  detail::ScriptRunner scripts;
  std::vector<detail::QueueKeys> keys;  // one per partition
  std::string max_len_text;
  int next_partition = 0;          // the partition of the next task without a key (the first: at random)
  std::size_t last_partition = 0;  // of the last task enqueue() wrote
  std::mutex waiter_mutex;
  std::unique_ptr<detail::Waiter> waiter_;
};

}  // namespace streamq
