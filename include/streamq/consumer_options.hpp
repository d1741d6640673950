// SPDX-License-Identifier: MIT
// The Consumer's settings and what it reports: retry backoff, rate and concurrency limits, the
// handler executors, HandlerOptions, ConsumerOptions, ConsumerMetrics. The Consumer itself is
// streamq/consumer.hpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "streamq/common.hpp"
#include "streamq/export.hpp"
#include "streamq/middleware.hpp"

namespace streamq {

class Tracer;  // streamq/tracing.hpp

/// How long a failed attempt waits before its retry: retry n (n = the task's retry_count
/// before the failure, from 0) waits a uniformly random time in
/// [0, min(cap, base * factor^n)) ("full jitter", so workers that failed together do not
/// retry together), or exactly min(cap, base * factor^n) with jitter off. The retry copy
/// waits in `<stream>:delayed` and is forwarded when due. base = 0 retries at once (the
/// copy goes straight to the stream, as before backoff existed).
struct STREAMQ_EXPORT RetryBackoff {
  std::chrono::milliseconds base{1000};
  std::chrono::milliseconds cap{std::chrono::minutes(10)};
  /// >= 1.
  double factor = 2.0;
  bool jitter = true;
};

/// A limit on how often tasks of one type start, shared by every consumer of the stream, of
/// every group (kept in Redis, `<stream>:rate:<task type>`, by the server's clock): at most `limit` starts in
/// any window of `per`. A task over the limit is not run, not failed and not counted as an
/// attempt: it goes back to the delayed set, due when the window has room again.
/// limit = 0: no limit.
struct STREAMQ_EXPORT RateLimit {
  std::int64_t limit = 0;
  std::chrono::milliseconds per{1000};
};

/// A limit on how many tasks run at once, across every consumer of the queue (kept in Redis as
/// a sorted set of leases, `<stream>:running` for the queue, `<stream>:running:<task type>` for
/// one type, by the server's clock). A task that finds every slot taken is not run, not failed
/// and not counted as an attempt: it goes back to the delayed set for 100 to 500 ms (random),
/// so it does not hold a handler thread, and tasks of other types run meanwhile. A slot is held
/// from the handler's start to its return and renewed with the entry's lease; the slot of a
/// worker that died frees itself after claim_min_idle, and so does the slot of a task given up
/// on (see HandlerOptions::timeout: its thread may still run). limit = 0: no limit.
struct STREAMQ_EXPORT ConcurrencyLimit {
  int limit = 0;
};

/// Where a handler runs (HandlerOptions::executor).
enum class HandlerExecutor {
  /// On one of the consumer's handler threads (the default): cheapest; a timeout can only ask
  /// the handler to stop (see HandlerOptions::timeout).
  thread,
  /// Each attempt in a child process, one of a pool of reusable children forked by a fork
  /// server: a copy of the worker made at Consumer::run() (or Consumer::start_fork_server()),
  /// before streamq starts any thread, with the handlers registered then. A handler thread hands
  /// the task to an idle child over a Unix socket and waits for its report; a child runs one task
  /// at a time, for ProcessLimits::tasks_per_child tasks. A timeout, a deadline, a cancel or a
  /// lost lease sends the child's process group SIGTERM, and SIGKILL half a timeout_grace later
  /// if it is still there, so runaway work really stops; the fork server forks a replacement.
  /// ProcessLimits bound its memory and CPU per task; a crash or a kill of the child (a segfault,
  /// an abort, a limit) is a failure of that task alone, retried as any failure, never of the
  /// worker. Nothing outlives the worker: when it dies (any signal, kill -9), the fork server
  /// kills every child's process group and what they started; a child whose leases the worker
  /// stopped renewing (the worker frozen) is killed within one lease. The middleware around the
  /// handler stays in the worker. In the child, Task::stop_token() never fires (the worker stops
  /// it with signals); Task::set_result, set_progress and write_partial_result work (the worker
  /// writes them). What a handler in a child may and may not do: docs/control.md.
  process,
};

/// Bounds of a handler run in a child process (HandlerExecutor::process). The first two are set
/// with setrlimit in the child before each task of the type and set back after it (soft limits:
/// the hard ones stay the worker's, so a handler could raise them again). 0 = the worker's own
/// limits.
struct STREAMQ_EXPORT ProcessLimits {
  /// RLIMIT_AS: the child's address space, bytes, counting what it inherits of the worker's
  /// (its heap at the fork server's fork; not the worker's later threads). An allocation past it
  /// fails (std::bad_alloc: a failure of the attempt). Not usable under AddressSanitizer or
  /// ThreadSanitizer, which reserve terabytes of address space. A limit the kernel refuses to
  /// set fails the attempt.
  std::uint64_t address_space = 0;
  /// RLIMIT_CPU: CPU seconds per task; past it the kernel kills the child (SIGXCPU).
  std::chrono::seconds cpu{0};
  /// A child leaves after this many tasks (>= 1; 1: a new child for every task), and the fork
  /// server forks a new one at the next need, as Celery's max_tasks_per_child.
  int tasks_per_child = 1000;
  /// A child whose resident set is over this many bytes after a task leaves (0: no limit).
  std::uint64_t memory_per_child = 0;
};

/// Per task type options for Consumer::on.
struct STREAMQ_EXPORT HandlerOptions {
  /// Overrides ConsumerOptions::retry_backoff for this type.
  std::optional<RetryBackoff> retry_backoff{};
  RateLimit rate{};
  /// How long one attempt may run (0 = no limit). When it passes, the task's stop_token is
  /// signalled (Task::stop_requested(), stop_reason() "timeout") and the attempt ends as a
  /// failure whatever the handler then does: retried after its backoff, dead-lettered with
  /// reason `timeout` once out of retries. A handler that ignores the token is given
  /// ConsumerOptions::timeout_grace more; then the task's fate is written all the same (the
  /// retry, or the dead letter), and when the handler returns at last, what it returned is
  /// dropped. Its thread stays busy until then (a thread cannot be killed), so a run of handlers
  /// that never return leaves the consumer with fewer threads. The retry may start on another
  /// worker while the stuck handler still runs: delivery stays at-least-once.
  std::chrono::milliseconds timeout{0};
  /// At most this many tasks of this type run at once across every consumer (see
  /// ConcurrencyLimit).
  ConcurrencyLimit concurrency{};
  /// At most this many tasks of this type run at once in this consumer (0 = up to
  /// ConsumerOptions::concurrency). A task over it goes back to the delayed set for 100 to
  /// 500 ms, as with ConcurrencyLimit. A handler that never returns keeps its place: give the
  /// type a timeout (with the process executor, the child is then killed and the place freed).
  int max_in_flight = 0;
  /// Where the handler runs (see HandlerExecutor).
  HandlerExecutor executor = HandlerExecutor::thread;
  /// With HandlerExecutor::process: the child's limits.
  ProcessLimits limits{};
  /// What a throw of a handler that its worker asked to stop (stop_reason() "shutdown": a deploy,
  /// Consumer::stop) means. True (default): the attempt did not fail, it was interrupted: the task
  /// is handed back (at once into its stream, its retry count unchanged, no backoff, a tracked
  /// record `queued`; ConsumerMetrics::handed_back). False: it counts as a failed attempt, as any
  /// throw (for a type that must count every start). A handler that returns completes its task
  /// either way.
  bool hand_back_on_shutdown = true;
};

/// Consumer configuration. Validated by the Consumer constructor (ConfigError names the field).
struct STREAMQ_EXPORT ConsumerOptions {
  ConnectionOptions connection{};
  std::string stream = "task_queue";
  /// Consumer group; created at id 0 with MKSTREAM if missing, so tasks enqueued before the
  /// first worker started are run.
  std::string group = "workers";
  /// Name in the group. A stable name lets a restarted worker replay its own pending entries at
  /// once instead of waiting for claim_min_idle. Empty (default) = the lowest
  /// "<hostname>-<n>" (n = 1, 2, ...) that no live process holds, chosen by run() at start: a
  /// worker restarted after a crash takes the name its predecessor held and replays its work at
  /// once. When the ACL user may not read the name keys or run CLIENT LIST (so which names are
  /// free cannot be told), "<hostname>-<pid>-<8 hex digits>", unique per process, with a warning.
  /// While it runs, a consumer holds its name (key `<stream>:live:...`): run() of a second live
  /// process with the same name in the same group throws ConfigError, and a consumer whose name
  /// another process took while it was stopped for longer than claim_min_idle stops, its run()
  /// throwing ConfigError.
  std::string consumer_name{};
  /// Handler threads.
  int concurrency = 4;
  /// The queue's partitions (ProducerOptions::partitions): 1 (default) = one stream, named
  /// `stream`. P > 1 = P streams `{<stream without braces>:0}` ... `{...:P-1}`, each with its own
  /// keys in a slot of its own on Redis Cluster; this consumer reads every one of them. Each
  /// partition gets its share of `concurrency` and `prefetch` (so concurrency must be >=
  /// partitions), a reading connection of its own, and its own lease keeper, reclaimer,
  /// forwarder and completer; rate limits (HandlerOptions::rate) stay shared by the whole
  /// queue. At most 1024.
  int partitions = 1;
  /// Most entries held at once (queued, running, or awaiting their ack). Must be >=
  /// concurrency. Within it, the consumer keeps unstarted only about 10 ms of its handlers'
  /// recent work (measured from their starts; at least one entry, and one more per idle
  /// handler): a worker of short tasks reads in batches of up to half the prefetch, and one of
  /// long tasks holds little beyond what runs, so other workers take the rest of the backlog.
  /// Asynchronous handlers free their thread at once, so for them prefetch bounds the tasks in
  /// flight. A read asks every priority level it includes for at least one entry, so up to 2
  /// more than prefetch may be held for a moment (when little room is left and a read covers
  /// all three levels).
  int prefetch = 128;
  /// How the priority levels (high, normal, low: `<stream>:p:high`, `<stream>`,
  /// `<stream>:p:low`) are served. Empty (default) = strict order: a level is read only when
  /// every more important one was found drained by the read before, and a high task read while
  /// normal ones wait in this consumer's prefetch runs before them. Three weights {high,
  /// normal, low}, each 1 to 1000, e.g. {6, 3, 1} (asynq's `Queues`) = weighted order: while
  /// several levels have tasks, each read goes to the level furthest behind its share of the
  /// tasks served, so they are served in proportion to the weights and none is starved; tasks
  /// then start in the order they were read.
  std::vector<int> priority_weights{};
  /// XREADGROUP BLOCK time. connection.socket_timeout must exceed it by at least 1 s.
  std::chrono::milliseconds block{1000};
  /// An entry pending this long without a heartbeat is taken by another consumer's
  /// reclaimer. Must be >= 3 * heartbeat_interval.
  std::chrono::milliseconds claim_min_idle{30000};
  /// How often this consumer looks for other consumers' stalled entries (pending and idle for
  /// claim_min_idle: a bounded XPENDING walk and an XCLAIM of each, in one script), and sooner
  /// while more may wait.
  std::chrono::milliseconds reclaim_interval{5000};
  /// How often the leases of held entries are renewed (owner-checked XCLAIM ... JUSTID).
  std::chrono::milliseconds heartbeat_interval{5000};
  /// Crash-loop guard: an entry whose handler was started this many times without finishing
  /// (its worker died while running it, each time) is dead-lettered ("max_deliveries")
  /// instead of being run again. A crash also charges the entries the worker had only
  /// prefetched, once (their first delivery); entries released unstarted at a graceful
  /// shutdown are not charged. Must be >= 2.
  int max_deliveries = 5;
  /// After stop() (or the first SIGINT/SIGTERM), running handlers get this long to finish
  /// before run() returns anyway; a second signal ends it at once. A handler still running
  /// then keeps its entry (it is reclaimed after claim_min_idle) and its thread is left to
  /// finish on its own: neither run() nor the destructor waits for it.
  std::chrono::milliseconds shutdown_grace{10000};
  /// Payloads larger or deeper than these are dead-lettered without running.
  std::size_t max_payload_bytes = 1 << 20;
  int max_payload_depth = 64;
  /// max_retries for entries that lack the field (the seed's default).
  int default_max_retries = 3;
  /// When true, run() stops on SIGINT or SIGTERM (handlers are installed for the duration of
  /// run() and the previous ones restored). The first signal stops gracefully, a second one
  /// ends the shutdown grace period at once. Off by default: the library installs no signal
  /// handler unless asked.
  bool stop_on_signals = false;
  /// Consumers of the group idle at least this long and holding no pending entry are removed
  /// from the group (XGROUP DELCONSUMER, checked and done in one script), so restarts under
  /// new names do not pile up consumers. Checked at start and then every
  /// min(idle_consumer_timeout / 4, 5 min). 0 = never; otherwise >= claim_min_idle.
  std::chrono::milliseconds idle_consumer_timeout{std::chrono::hours(1)};
  /// When a failed task is retried (see RetryBackoff; per type: HandlerOptions). A handler
  /// can choose the delay itself by throwing streamq::RetryAfter.
  RetryBackoff retry_backoff{};
  /// Delayed tasks (EnqueueOptions::delay/run_at, delayed retries) are moved to their stream
  /// when due by a forwarder in every consumer (one script per pass moves at most 1,000, so
  /// forwarders never duplicate or lose one). The consumer holding the queue's forwarder
  /// lease (`<stream>:forwarder`, renewed each pass) polls every forward_interval, and
  /// sooner when the next task is due sooner; the others poll once a second and take the
  /// lease over within about 3 s if its holder stops. Due tasks become visible within about
  /// forward_interval of their due time. Must be > 0.
  std::chrono::milliseconds forward_interval{50};
  /// How often the consumer checks the queue's pause flag (`<stream>:paused`, set by
  /// Inspector::pause and `streamq pause`; one EXISTS per check). While it is set the
  /// consumer reads no new tasks and reclaims none; tasks already read finish, delayed tasks
  /// are still forwarded (they wait in the stream), and reading resumes within this interval
  /// of Inspector::resume. A read already waiting on the server when the flag is set may
  /// still deliver one batch. Must be > 0.
  std::chrono::milliseconds pause_check_interval{1000};
  /// How long a task asked to stop by its timeout (HandlerOptions::timeout), its deadline
  /// (EnqueueOptions::deadline) or an operator's cancel (Inspector::cancel) may still run
  /// before the consumer gives it up: writes its fate (retry, dead letter, cancelled) without
  /// waiting for the handler, and drops what the handler returns later. Must be > 0.
  std::chrono::milliseconds timeout_grace{5000};
  /// At most this many tasks of the queue run at once across every consumer (see
  /// ConcurrencyLimit), whatever their type. Consumers of one queue should agree on it.
  ConcurrencyLimit concurrency_limit{};
  /// Starts a span per attempt (see streamq/tracing.hpp): a child of the producer's context the
  /// task carries, linked to the failed attempt a retry follows. Null: none.
  std::shared_ptr<Tracer> tracer{};
};

/// Counters since the Consumer was built. All reads are relaxed snapshots.
struct STREAMQ_EXPORT ConsumerMetrics {
  /// Handler returned, and the entry's XACK + XDEL was written.
  std::uint64_t done = 0;
  /// Retry copies written (at once or into the delayed set).
  std::uint64_t retried = 0;
  /// Dead-letter entries written by this consumer, for any reason (including entries its
  /// reclaimer or replay found lost or crash-looping before running them).
  std::uint64_t dead_lettered = 0;
  /// Stalled entries taken over from other consumers.
  std::uint64_t reclaimed = 0;
  /// This consumer's own pending entries fetched again after a start or a reconnect.
  std::uint64_t replayed = 0;
  /// Entries not run because, before their handler started, another consumer took them or
  /// their body was deleted (those are dead-lettered, see dead_lettered).
  std::uint64_t skipped = 0;
  /// Retry or dead-letter writes dropped because another consumer owned the entry by then, or
  /// it was no longer pending: the task's fate was not this consumer's to decide any more.
  std::uint64_t stale = 0;
  /// Connections re-established after one was lost (failed attempts are not counted).
  std::uint64_t reconnects = 0;
  /// Idle consumers without pending entries removed from the group (idle_consumer_timeout).
  std::uint64_t consumers_removed = 0;
  /// Delayed tasks this consumer's forwarder moved to their stream, and members of the delayed
  /// set it dead-lettered as "malformed" (not in streamq's format).
  std::uint64_t forwarded = 0;
  /// Tasks put back into the delayed set because their type's rate limit was reached, or a
  /// concurrency limit (ConcurrencyLimit, HandlerOptions::max_in_flight).
  std::uint64_t rate_limited = 0;
  /// Running tasks ended as cancelled by an operator (Inspector::cancel).
  std::uint64_t cancelled = 0;
  /// Attempts that ran past their timeout or deadline (counted when their fate is written).
  std::uint64_t timed_out = 0;
  /// Tasks given up on: asked to stop, their handler did not return within timeout_grace.
  std::uint64_t given_up = 0;
  /// Started tasks handed back unfinished and uncounted (not a failed attempt): interrupted by
  /// the worker's stop (HandlerOptions::hand_back_on_shutdown), or stopped because their holder
  /// could not keep its entry's or a concurrency slot's lease (stop_reason() "lease_lost").
  std::uint64_t handed_back = 0;
};

}  // namespace streamq
