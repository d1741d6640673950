// SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "streamq/common.hpp"
#include "streamq/export.hpp"
#include "streamq/record.hpp"
#include "streamq/stats.hpp"
#include "streamq/task.hpp"

namespace streamq {

struct STREAMQ_EXPORT InspectorOptions {
  ConnectionOptions connection{};
  /// The consumer group whose pending entries are reported and whose deliveries cancel()
  /// respects (the Consumer's default group).
  std::string group = "workers";
};

/// Where a task is.
enum class TaskState {
  queued,   ///< in a stream of the queue, not yet delivered to the group
  pending,  ///< delivered to a consumer of the group and not finished (running, or its worker died)
  delayed,  ///< in the delayed set, waiting for its due time (delay, run_at, retry backoff)
  dead,     ///< in the dead-letter stream
  /// in its tenant's backlog (EnqueueOptions::tenant, docs/tenants.md): enqueued, its turn not
  /// come yet (it enters a stream of the queue, queued, at its tenant's turn)
  backlog,
};
/// "queued", "pending", "delayed", "dead" or "backlog".
STREAMQ_EXPORT std::string_view to_string(TaskState s) noexcept;
/// The inverse of to_string(); nullopt for anything else.
STREAMQ_EXPORT std::optional<TaskState> parse_task_state(std::string_view s) noexcept;
/// "high", "normal" or "low".
STREAMQ_EXPORT std::string_view to_string(Priority p) noexcept;
STREAMQ_EXPORT std::optional<Priority> parse_priority(std::string_view s) noexcept;

/// A queue found on the server: a stream with streamq's shape and the keys derived from it, or
/// a partitioned queue (ProducerOptions::partitions): every `{<name>:<i>}` stream as one queue.
struct STREAMQ_EXPORT QueueInfo {
  /// The queue's name: its normal-priority stream (ConsumerOptions::stream); for a partitioned
  /// queue the partitions' name without braces and index (`orders` for `{orders:0}`, …), or the
  /// name of a queue of one stream that has the same partitions (`{orders}`, see `partitions`).
  std::string name;
  /// A partitioned queue's streams: `{<name>:0}` up to the highest index that has a key, then the
  /// stream `name` itself when it exists too (a queue whose partition count went from 1 to more,
  /// still draining). Empty for a queue of one stream.
  std::vector<std::string> partitions;
  /// The priority levels whose stream exists (in any partition), most important first.
  std::vector<Priority> levels;
  std::string dlq;          ///< `<name>:dlq`; empty for a partitioned queue (each has `<partition>:dlq`)
  std::string delayed;      ///< `<name>:delayed`; empty for a partitioned queue
  std::int64_t length = 0;  ///< unfinished entries over every level (and partition)
  std::int64_t dlq_length = 0;
  std::int64_t delayed_count = 0;
  /// Inspector::pause() was called and resume() not since (for a partitioned queue: on every partition).
  bool paused = false;
};

/// One task as an operator sees it.
struct STREAMQ_EXPORT TaskInfo {
  TaskState state = TaskState::queued;
  /// The level of the stream it is in (queued, pending), or the one it goes to when due
  /// (delayed), or of its backlog's list (backlog). Dead letters do not record their level:
  /// normal.
  Priority level = Priority::normal;
  /// The Redis key it sits in (backlog: its tenant's list of that level, `<queue>:tenant:<t>`
  /// with `:p:high` or `:p:low` for those levels).
  std::string key;
  /// In a partitioned queue, the stream of the partition it is in (`{orders:3}`); empty otherwise.
  /// `<partition>/<id>` names it exactly where an Inspector call takes an id (entry ids of
  /// different partitions can be equal).
  std::string partition;
  /// The entry id in `key` (queued, pending, dead); for a delayed task or one in a backlog its
  /// task_id (it has no entry id yet).
  std::string id;
  /// Every field of the entry, in order (task_id, task_type, payload, created_at, ...; a
  /// dead letter adds error, failed_at, original_id, consumer, reason).
  Fields fields;
  /// Pending only: the consumer it was delivered to, ms since that consumer last touched it
  /// (its heartbeat renews this), and how many times it was delivered.
  std::string consumer;
  std::int64_t idle_ms = 0;
  std::int64_t deliveries = 0;
  /// Pending only, filled by Inspector::task (listings leave it unset): what the holder's name
  /// lock (`<stream>:live:...`, renewed with every heartbeat, kept claim_min_idle after the last
  /// renewal) says of it. Unset when the holder has no name lock: it stopped cleanly, or has
  /// been gone for claim_min_idle, and any consumer's next reclaim pass takes the entry.
  struct Holder {
    /// Since its last renewal, by the server's clock.
    std::int64_t silent_ms = 0;
    /// Its claim_min_idle (the lease), as the name lock's time to live tells.
    std::int64_t lease_ms = 0;
    /// Its process is gone: the connection that renews its name is closed (the process died
    /// or was killed), the check a consumer restarted under that name makes to take it over at
    /// once (one `CLIENT LIST ID`; a user the ACL refuses it leaves this false).
    bool gone = false;
    /// Its heartbeats come: not gone, and silent for less than a third of its lease (a heartbeat
    /// is at most that). False: it is gone, frozen or cut off (a `running` record of the task
    /// says what it last wrote, not that it runs).
    bool renewing = false;
    /// When another consumer may take the entry over, if the holder does not renew its lease:
    /// its lease less the entry's idle time (0: now).
    std::int64_t reclaim_in_ms = 0;
  };
  std::optional<Holder> holder{};
  /// Delayed only: when it is due (ms since the Unix epoch, the server's clock).
  std::int64_t due_ms = 0;
  /// The record of a tracked task (one with a `retention` field), when Inspector::task found it
  /// (listings leave it unset).
  std::optional<TaskRecord> record{};

  /// The value of field `name`, or "" when the entry has none.
  std::string_view field(std::string_view name) const noexcept;
  std::string_view task_id() const noexcept { return field("task_id"); }
  std::string_view task_type() const noexcept { return field("task_type"); }
  std::string_view payload() const noexcept { return field("payload"); }
  /// A JSON object: state, level, key, id, fields (an object), and consumer, idle_ms,
  /// deliveries and holder (pending: an object with silent_ms, lease_ms, gone, renewing
  /// and reclaim_in_ms, or null when unknown) or due_ms (delayed), partition when it is set, and
  /// record when there is one. Bytes that are not UTF-8 are replaced (U+FFFD).
  std::string to_json() const;
};

/// A page of tasks; pass `next_cursor` back for the next page. Empty: this was the last.
struct STREAMQ_EXPORT TaskPage {
  std::vector<TaskInfo> tasks;
  std::string next_cursor;
};

/// Which tasks to list.
struct STREAMQ_EXPORT TaskQuery {
  TaskState state = TaskState::queued;
  /// Only this level (queued, pending, backlog); unset = every level, most important first.
  std::optional<Priority> level{};
  /// Where to continue (TaskPage::next_cursor); empty = from the start.
  std::string cursor{};
  /// At most this many tasks per page (1 to 10,000).
  std::size_t count = 100;
};

/// Which dead letters replay() and delete_dead() act on. Every set criterion must match.
struct STREAMQ_EXPORT DeadLetterFilter {
  /// These dead-letter entry ids only (at most 10,000); empty = every dead letter.
  std::vector<std::string> ids{};
  /// Only tasks of this type; empty = any.
  std::string task_type{};
  /// Only dead letters with this reason (e.g. "max_retries", "permanent", "no_handler"); empty = any.
  std::string reason{};
};

/// How far a bulk action got, reported between its batches.
struct STREAMQ_EXPORT Progress {
  std::int64_t done = 0;     ///< tasks acted on so far
  std::int64_t scanned = 0;  ///< entries looked at so far
  std::int64_t total = 0;    ///< entries there were to look at when it started
};
/// Called after every batch; returning false stops the action there (what was done stays
/// done, nothing is left half-done: each batch is one atomic script or command).
using ProgressCallback = std::function<bool(const Progress&)>;

/// A batch's state and counts (Inspector::batch).
struct STREAMQ_EXPORT BatchInfo {
  std::string batch_id{};
  /// "open" (tasks may join), "closed" (members still running) or "fired" (its callbacks were
  /// enqueued).
  std::string state{};
  /// Members so far (tasks and nested batches), and how many ended done and failed (dead or
  /// cancelled); the rest are pending.
  std::int64_t total = 0;
  std::int64_t done = 0;
  std::int64_t failed = 0;
  std::int64_t pending() const noexcept { return total - done - failed; }
  /// The batch this one is nested in, if any.
  std::string parent_batch{};

  /// A JSON object: batch_id, state, total, done, failed, pending and parent_batch ("" when
  /// none).
  std::string to_json() const;
};

/// A task of a flow and the tasks below it (Inspector::flow).
struct STREAMQ_EXPORT FlowTree {
  std::string task_id{};
  /// Its record; unset when it is gone (its retention passed).
  std::optional<TaskRecord> record{};
  std::vector<FlowTree> children{};
  /// The queue it is in: the one Inspector::flow was asked about, or a child's other queue
  /// (FlowNode::queue).
  std::string queue{};
};

struct STREAMQ_EXPORT ReplayOptions {
  DeadLetterFilter filter{};
  /// The level whose stream the tasks go back to (dead letters do not record theirs).
  Priority priority = Priority::normal;
  ProgressCallback progress{};
};

struct STREAMQ_EXPORT ActionResult {
  /// Tasks replayed, deleted, ...
  std::int64_t done = 0;
  /// Matching entries left alone: gone meanwhile (another operator, a worker), or not tasks
  /// (a replay skips dead letters without task_type or payload, e.g. malformed delayed members),
  /// or, for a replay, the provisional record of a task whose handler still runs (see replay()).
  std::int64_t skipped = 0;
  /// False when the progress callback stopped the action early.
  bool finished = true;
};

/// What cancel() did.
enum class CancelOutcome {
  cancelled,  ///< removed; no worker will run it
  missing,    ///< not found (finished, cancelled, moved, or never there)
  running,    ///< delivered to a consumer and not finished: its holder is asked to stop it
};

/// One finding of Inspector::doctor().
struct STREAMQ_EXPORT Finding {
  enum class Severity {
    ok,       ///< as it should be
    info,     ///< worth knowing (a feature the server lacks, a check that could not run)
    warning,  ///< works, but risky (e.g. appendfsync no, no replica, little memory left)
    danger,   ///< would lose tasks (no persistence, an evicting maxmemory-policy, a version too old)
  };
  Severity severity = Severity::ok;
  /// What was checked: "version", "persistence", "maxmemory-policy", "memory", "acl",
  /// "replication", "clock".
  std::string topic;
  /// What was found, and for anything but ok what to do about it.
  std::string message;
};
/// "ok", "info", "warning" or "danger".
STREAMQ_EXPORT std::string_view to_string(Finding::Severity s) noexcept;

/// Reads and manages queues for operators: the library API behind the `streamq` command,
/// its exporter and its dashboard. Every action is atomic on the server (one script or one
/// command per batch) and safe while workers run. Nothing loads a whole stream: lists page
/// (TaskQuery::count), bulk actions go in batches of at most 500, and discovery uses SCAN.
///
/// **Partitioned queues.** A queue name stands for the queue's partitions when a key of its
/// partition 0, `{<name without braces>:0}`, exists (workers create every partition's stream);
/// then every call finds the others with one pipelined EXISTS per possible partition (i <
/// 1024), and queues() lists such a family as one queue (streams shaped `{x:1}`, `{x:42}`
/// without an `{x:0}` stay queues of their own). Stats are their sum (QueueStats::partitions), lists walk the
/// partitions one after another (TaskInfo::partition says which), actions act on each, pause()
/// sets every partition's flag. The stream `name` itself is included when it exists too (the
/// queue of one stream the partitions replaced). An entry id may be given as
/// `<partition>/<entry id>`; one without its partition that two partitions have is a ConfigError
/// where it would act (cancel, replay and delete by id), the first found where it reads (task()).
/// A partition's own name (`{orders:3}`) addresses that partition alone.
///
/// Thread safety: calls may overlap from any number of threads. It holds one connection, and its
/// calls take turns on it (one call at a time: an events() call that blocks holds the others up
/// for its `block`). Movable, not copyable; moving it must not overlap a call. Every call may throw
/// ConnectionError / TimeoutError, or ReplyError (e.g. NOPERM for an ACL user without the command).
/// A tenant's settings (EnqueueOptions::tenant, docs/tenants.md), kept in Redis: a tenant's own
/// (Inspector::set_tenant) win over every tenant's default (Inspector::set_tenant_defaults). In
/// a call that sets them, a field left unset is left as it was; read back (TenantInfo), an unset
/// field was set nowhere (the built-in default applies: weight 1, no limits).
struct STREAMQ_EXPORT TenantSettings {
  /// Its share of the turns: a tenant of weight 3 is served three tasks to one of weight 1.
  /// Greater than 0, at most 1,000,000.
  std::optional<double> weight{};
  /// At most this many of its tasks run at once, across every worker (0: no limit).
  std::optional<int> concurrency{};
  /// At most `limit` of its tasks start per `per`, across every worker (limit 0: no limit).
  std::optional<std::int64_t> rate_limit{};
  std::optional<std::chrono::milliseconds> rate_per{};
  /// At most this many of its tasks wait in its backlog: an enqueue beyond it is refused with
  /// QueueFullError (0: no limit). Its delayed tasks count once due.
  std::optional<std::int64_t> max_len{};
};

/// A tenant that has work (Inspector::tenants).
struct STREAMQ_EXPORT TenantInfo {
  std::string tenant;
  std::string partition;     ///< the stream of the partition it lives in (the queue's own stream if one)
  std::int64_t backlog = 0;  ///< its tasks waiting in its backlog (every priority level)
  std::int64_t running =
      0;  ///< its tasks in the queue's streams: dispatched, running, or held by a worker that died
  bool paused = false;
  /// Its own settings (TenantSettings: set_tenant), the defaults apart.
  TenantSettings settings{};
};

class STREAMQ_EXPORT Inspector {
 public:
  /// Validates the options (ConfigError); connects lazily.
  explicit Inspector(InspectorOptions options = {});
  ~Inspector();
  Inspector(Inspector&&) noexcept;
  Inspector& operator=(Inspector&&) noexcept;
  Inspector(const Inspector&) = delete;
  Inspector& operator=(const Inspector&) = delete;

  /// Every queue on the server (this database): SCAN … TYPE stream (never KEYS), then for each
  /// candidate EXISTS/XLEN/ZCARD of its keys and its first entry. A stream is a queue when its
  /// oldest entry has task_id and task_type, when it has a consumer group and no entries, or
  /// when one of its derived keys exists (`:dlq`, `:delayed`, `:p:high`, `:p:low`, or the sets of
  /// its tenants with work, `:tenants:ready` and `:tenants:waiting`, also SCANned: a queue whose
  /// tasks all wait in its tenants' backlogs has no stream yet). Sorted by name.
  std::vector<QueueInfo> queues();

  /// The queue's health (what StatsReader::read returns), for every group; with the tasks
  /// waiting in its tenants' backlogs (QueueStats::backlog).
  QueueStats stats(const std::string& queue);

  /// One page of the queue's tasks in `query.state`. Queued: XRANGE after the group's
  /// last-delivered id; pending: XPENDING (extended form) and the bodies with XRANGE; delayed:
  /// the delayed set in due order (a script decodes its members); dead: XRANGE of the
  /// dead-letter stream; backlog: the tasks waiting in the backlogs of the tenants of the ready
  /// set, then of the waiting set (`<queue>:tenants:ready`, `:tenants:waiting`), each set in its
  /// order, a tenant's levels high to low, each oldest first (one read-only script a page: ZRANGE
  /// of the sets, LRANGE of the lists, the elements decoded; it looks at most at max(count,
  /// 1,000) tenants, so a page may hold fewer than `count` tasks and still have a next_cursor).
  /// While tenants are served, a backlog listing goes on: a tenant still at the score it had
  /// from the index it reached in its list (tasks taken from its head meanwhile are skipped
  /// over), a tenant whose turn moved it (a new pass, or to the waiting set) after where it stood
  /// (its tasks may come again later in the listing); it may so skip or repeat a task, never
  /// fails. Throws ConfigError for a count out of range or a cursor that is not one of this
  /// state's.
  TaskPage tasks(const std::string& queue, const TaskQuery& query);

  /// One task by entry id (looked up directly in each level's stream, then in the dead-letter
  /// stream: ids of different streams can be equal, and the first found is returned) or by task_id (anything
  /// that is not an entry id: every key of the queue is scanned in pages of 1,000, O(queue size) round trips
  /// but bounded memory: the level streams, the dead-letter stream, the delayed set, then the
  /// tenants' backlogs, a page being 1,000 tasks or 1,000 tenants, as tasks() lists them). A
  /// pending task's holder (TaskInfo::holder) costs a pipeline of GET, PTTL and TIME, and a
  /// `CLIENT LIST ID`.
  std::optional<TaskInfo> task(const std::string& queue, const std::string& id);
  /// The record of tracked task `task_id` (EnqueueOptions::retention): its state, attempts,
  /// times, worker, error, result and progress; nullopt when there is none (not tracked, or
  /// its retention passed). HGETALL on each partition. `<partition>/<task id>` names one.
  std::optional<TaskRecord> record(const std::string& queue, const std::string& task_id);
  /// A flow's task (Producer::enqueue_flow) and every task below it, each with its record (its
  /// state: a parent `waiting` for its children, ...). The children are the ones the parent's
  /// record names (TaskRecord::children); a child whose record is gone (its retention passed)
  /// has none and shows no children. nullopt when `task_id` has no record. A record read per
  /// task (at most 10,000).
  std::optional<FlowTree> flow(const std::string& queue, const std::string& task_id);
  /// Batch `batch_id` (Producer::open_batch): its state and counts; nullopt when there is none
  /// (never opened, or fired more than a day ago). HGETALL on each partition.
  std::optional<BatchInfo> batch(const std::string& queue, const std::string& batch_id);
  /// The events of the queue's tracked tasks after `after` ("" = from the oldest kept; "$" =
  /// only new ones), at most `count` per partition, waiting up to `block` for one when none is
  /// there yet (0: no wait). In a partitioned queue, `after` holds one id per partition,
  /// space-separated (what QueueEvents::next holds). XREAD.
  struct QueueEvents {
    std::vector<QueueEvent> events;
    /// Where to read on from.
    std::string next;
  };
  QueueEvents events(const std::string& queue, const std::string& after, std::size_t count = 100,
                     std::chrono::milliseconds block = std::chrono::milliseconds(0));

  /// Puts dead-lettered tasks back into the queue (see ReplayOptions): each with retry_count 0,
  /// replay_count raised, replayed_from, replayed_at and last_error set; its dead letter is
  /// deleted in the same script. Only the dead letters there when it started are looked at, so
  /// tasks that fail again during a long replay are not replayed twice. A `body_lost` record
  /// written while the task's handler still runs (its entry was deleted under it) is skipped:
  /// the task's own completion replaces it; it can be replayed once it is final (the handler
  /// ended without a completion, e.g. its worker died, and claim_min_idle passed).
  ActionResult replay(const std::string& queue, const ReplayOptions& options = {});
  /// Deletes dead letters (XDEL in batches) that match `filter`. Deleting (or purging) the
  /// provisional record of a task whose handler still runs does not end the task: its own
  /// completion (a retry, a dead letter) is written all the same.
  ActionResult delete_dead(const std::string& queue, const DeadLetterFilter& filter,
                           const ProgressCallback& progress = {});
  /// Deletes every dead letter (XDEL in batches of 500, with the records of their tracked
  /// tasks), and the dead-letter stream's key once it is empty. Returns how many were deleted.
  /// Dead letters written meanwhile are kept.
  std::int64_t purge_dead(const std::string& queue);

  /// Moves a delayed task (by task_id) to its stream now. Returns the new entry id
  /// (`tenant:<name>` for a tenant's task: it enters its tenant's backlog, docs/tenants.md, and
  /// has no entry yet), or nullopt when no delayed task has that id (it may have become due
  /// meanwhile).
  std::optional<std::string> run_now(const std::string& queue, const std::string& task_id);
  /// Cancels a queued task (by entry id or task_id), a delayed one or one waiting in its
  /// tenant's backlog (by task_id: found as task() finds it). A delayed or backlog task is
  /// removed (ZREM, or LREM of its exact element) and ended cancelled in one script, its record
  /// and event `cancelled`, its unique lock released; a tenant left with nothing waiting leaves
  /// the ready and waiting sets (a backlog's list goes with its last element). A task a
  /// consumer holds is asked to stop (the answer is `running`): a cancel request
  /// `<level stream>:cancel:<entry id>` (kept 24 h) that its holder finds within one
  /// heartbeat_interval; the handler's stop_token is signalled (Task::stop_reason()
  /// "cancelled"), and when it returns the task ends cancelled: acknowledged, not retried, not
  /// dead-lettered, its unique lock released, its record and event `cancelled`. A handler that
  /// ignores the token is given ConsumerOptions::timeout_grace, then the task ends cancelled
  /// all the same. One that finishes before the request reaches it ends as it finished.
  /// ConfigError when a stream of the queue has consumer groups but not InspectorOptions::group
  /// (whether the task was delivered cannot be told): nothing changes. A flow's parent that
  /// waits for its children (Producer::enqueue_flow; by task_id) is cancelled, and each of its
  /// unfinished children is cancelled as above (the answer is `cancelled` for the parent).
  CancelOutcome cancel(const std::string& queue, const std::string& id);

  /// Pauses the queue: sets `<queue>:paused` (SET, no expiry). Consumers stop reading and
  /// reclaiming within ConsumerOptions::pause_check_interval; running tasks finish, delayed
  /// tasks still become due (they wait in the stream). Idempotent.
  void pause(const std::string& queue);
  /// Resumes a paused queue (DEL of the flag). Idempotent.
  void resume(const std::string& queue);
  bool paused(const std::string& queue);

  /// Fair queues per tenant (docs/tenants.md). Sets tenant `tenant`'s own settings (the fields
  /// given; in every partition of the queue: the tenant lives in one). ConfigError for a value
  /// out of range or a bad tenant name (1 to 256 bytes, no NUL), nothing written.
  void set_tenant(const std::string& queue, const std::string& tenant, const TenantSettings& settings);
  /// Sets the defaults of every tenant of the queue (the fields given).
  void set_tenant_defaults(const std::string& queue, const TenantSettings& settings);
  /// Forgets tenant `tenant`'s own settings (the defaults apply again); its pause stays.
  void clear_tenant(const std::string& queue, const std::string& tenant);
  /// Pauses one tenant: none of its tasks starts (they wait in its backlog); its running ones
  /// finish. Idempotent. resume_tenant() lets its tasks start again at once.
  void pause_tenant(const std::string& queue, const std::string& tenant);
  void resume_tenant(const std::string& queue, const std::string& tenant);
  /// The tenants that have work (ready or waiting for their turn, a slot, a rate window or a
  /// resume), with their backlog and running counts, the largest backlog first; at most `count`
  /// (1 to 10,000) looked at per partition: the tenants with the lowest passes (next to be served)
  /// and the waiting ones.
  std::vector<TenantInfo> tenants(const std::string& queue, std::size_t count = 100);

  /// Checks whether the server runs streamq safely: its version and the features it enables,
  /// persistence (appendonly, appendfsync, RDB only), maxmemory-policy (must be noeviction),
  /// memory headroom, replicas, what an ACL user may run for each role of docs/operations.md's ACL
  /// lines (producer, worker, stats, operator) on `queue` (ACL DRYRUN on Redis >= 7.0): `user`,
  /// or this connection's own when empty (checking another user needs +acl|dryrun), and the
  /// skew between this machine's clock and
  /// the server's (TIME). Uses INFO, CONFIG GET (a finding of its own when refused), ACL
  /// WHOAMI/DRYRUN, TIME. The worst finding decides `streamq doctor`'s exit status.
  std::vector<Finding> doctor(const std::string& queue = "task_queue", const std::string& user = {});

  /// The server's clock (TIME), ms since the Unix epoch.
  std::int64_t server_time_ms();

 private:
  struct STREAMQ_NO_EXPORT Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamq
