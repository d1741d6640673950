// SPDX-License-Identifier: MIT
// The in-flight set: every entry a Consumer holds, from delivery until its completion is
// written, and the queues between the parts. It owns the consumer's only lock; every other
// part talks to the others through it and keeps no shared state of its own.
//
//   fetcher, reclaimer ──deliver()──▶ ready queue ──take()──▶ executor (handler threads)
//   executor ──finish()──▶ completion queue ──wait_completions()──▶ completer ──completed()
//   lease keeper: due_for_lease() / renewed() / lost(); gone bodies become orphan completions
//
// Entries are keyed by stream *and* id, so a consumer reading several streams (priority
// levels) keeps them apart. Called from every consumer thread; all members are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "metrics.hpp"
#include "start_pace.hpp"
#include "streamq/task.hpp"

namespace streamq::detail {

using Clock = std::chrono::steady_clock;

struct TaskControl;  // task_control.hpp
class ReportBox;     // report_box.hpp

/// One pending entry: which of the consumer's streams (an index; 0 = the queue's stream) and
/// its entry id there.
struct EntryKey {
  std::uint16_t stream = 0;
  std::string id;
  bool operator==(const EntryKey&) const = default;
};

struct EntryKeyHash {
  std::size_t operator()(const EntryKey& k) const noexcept;
};

/// How an entry came to this consumer.
enum class Origin : std::uint8_t {
  fresh,      // XREADGROUP >: its delivery count of 1 is this delivery
  replayed,   // this consumer's own pending entry, fetched again after a start or reconnect
  reclaimed,  // taken over from a consumer that stalled
};

/// A delivered entry on its way to a handler.
struct Work {
  EntryKey key;
  std::shared_ptr<const Fields> fields;  // null when the entry has no (readable) body
  std::int64_t deliveries = 1;
  Origin origin = Origin::fresh;
  std::uint64_t seq = 0;  // set by deliver(): tells this delivery from a later one of the same key
  /// Set by take() when less important entries wait behind this one (strict level order):
  /// they are not handed out until its handler is about to run (InFlight::entering).
  bool gates = false;
  /// Replayed and reclaimed entries may be what killed their previous worker: their start is
  /// counted in Redis before they run, and one whose next start may be its last (see
  /// InFlight::last_chance) runs with no other suspect beside it.
  bool suspect() const noexcept { return origin != Origin::fresh; }
};

/// A tracked task's start: its record says running and a 'started' event says so (running.lua).
/// Queued by the executor as the handler starts, instead of a round trip on the handler's path,
/// and written by the completer: many in one script call ahead of everything else it writes,
/// or by the done script together with the task's success when both are in hand. A completion
/// (or a report) is queued after its task's mark and never written before it, so a task's
/// 'done' never precedes its 'started'.
struct StartMark {
  EntryKey key;
  std::int64_t deliveries = 1;  // with the key, names the attempt (running.lua)
  Fields tracking;              // task_id, task_type, retention
};
using StartMarks = std::vector<StartMark>;

/// What the completer must write for an entry.
enum class Outcome : std::uint8_t {
  ack,          // done: XACK + XDEL
  retry,        // retry copy into the stream, then XACK + XDEL (one script)
  dead_letter,  // dead-letter entry, then XACK + XDEL (one script)
  orphan,       // the body was deleted while held: the fields this consumer read go to the
                // dead-letter stream as a provisional record that the entry's own completion
                // replaces, so the task ends in exactly one place whatever happens next
};

/// The uniqueness lock (EnqueueOptions::unique_for) a succeeded task releases with its ack.
struct UniqueLock {
  std::string key;     // <stream>:unique:<unique_key>; empty: the task has no unique_key
  std::string holder;  // the task id: the lock is deleted only while it still holds this one
};

struct Completion {
  EntryKey key;
  Outcome outcome = Outcome::ack;
  Fields fields{};  // retry: the copy to write; a tracked ack: its tracking fields (below)
  // dead_letter, orphan: what the dead-letter entry records (src/lua/lib/fate.lua builds it,
  // and releases a unique lock named by the fields read)
  std::shared_ptr<const Fields> read{};  // the fields read (null: none, the body was gone)
  std::string_view reason{};             // one of the reason:: values
  std::string error{};
  std::string failed_at{};  // format_timestamp() text
  // retry: how long the copy waits in the delayed set (0: straight to the stream), and
  // whether it stands for a failed attempt (false: put back unrun, by a rate limit)
  std::chrono::milliseconds delay{0};
  bool attempted = true;
  // ack: the lock to release with it. Such successes go to the completer, not the fetcher,
  // so the fetcher's acks (the plain path) carry nothing but their keys.
  UniqueLock unique{};
  // ack of a task an operator cancelled while it ran (Inspector::cancel): written by the done
  // script as `cancelled` (its `fields` hold task_id and task_type, and retention if tracked).
  bool cancelled = false;
  // retry or dead letter of an attempt that ran past its timeout or deadline (counted).
  bool timed_out = false;
  // written without waiting for its handler, which did not stop when asked (counted).
  bool given_up = false;
  // retry, not `attempted`: a started task handed back unfinished (its worker stopped, or it
  // lost a concurrency slot's lease): its fields as they were, written at once when `delay` is 0.
  bool handed_back = false;
  // ack of a tracked task (EnqueueOptions::retention): `fields` holds its task_id, task_type
  // and retention, `result` what it ended with; the completer writes it with the done script.
  bool tracked = false;
  // ack of a tenant's task (EnqueueOptions::tenant, tracked or not): `fields` holds its tracking
  // fields with its tenant; the done script ends it, which gives its tenant's slot back.
  bool tenant = false;
  std::optional<std::string> result{};
  // A tracked success whose start mark is written with it (set by the completer).
  bool start = false;
};

/// An unstarted entry to hand back at shutdown.
struct Unstarted {
  EntryKey key;
  /// The delivery count to give it back: 0 for one delivered fresh (it never ran), the count
  /// before its start was counted for a suspect put back at shutdown, -1 to keep it.
  std::int64_t count = -1;
};

/// What started() found.
enum class StartVerdict {
  run,       // it may run
  skip,      // not ours any more (or its body is gone): see not_run()
  put_back,  // the consumer is stopping: queued again, to be released unstarted
};

/// Snapshot of one held entry for the completer: where its fate stands.
struct FateInfo {
  bool held = false;      // still held (not completed, not dropped)
  bool running = false;   // its handler started (and may have finished)
  std::string orphan_id;  // id of its provisional dead-letter record, if its body went away
};

class InFlight {
 public:
  /// `by_level`: the ready queue keeps entries in level order (EntryKey::stream, lower first;
  /// FIFO within a level), so a more important entry runs before less important ones
  /// delivered earlier (strict priority order); otherwise it is FIFO. `max_deliveries`
  /// (ConsumerOptions::max_deliveries): suspects run beside each other, with the consumer's full
  /// concurrency, but one whose next start may be its last runs alone among suspects, so a
  /// crash-looping entry that kills the worker cannot use up another's last start; 0: every
  /// suspect runs alone.
  InFlight(std::size_t prefetch, Metrics& metrics, bool by_level = false, std::int64_t max_deliveries = 0);

  // ---- fetcher and reclaimer
  /// Adds entries to the ready queue; entries already held are not handed out twice.
  /// Returns how many were queued. Clears `works`.
  std::size_t deliver(std::vector<Work>& works);
  /// Blocks until at least half the prefetch is free (counting successes whose ack is still
  /// to be written as free: the fetcher writes them ahead of its next read), or `stop`.
  /// Returns false when stopping. The replay of this consumer's own pending list waits here:
  /// those entries are this consumer's already.
  bool wait_for_room(const std::stop_token& stop);
  /// As wait_for_room, and until at least half of what the handlers' pace allows to wait
  /// unstarted is free too (StartPace): the fetcher's wait before a read of new entries.
  bool wait_to_read(const std::stop_token& stop);
  /// Takes the successes to acknowledge in the fetcher's next request (ahead of its read) and
  /// returns how many entries that read may fetch: at most half the prefetch, and no more
  /// than the handlers' pace allows to wait unstarted, counting `reserved` entries that reads
  /// already in flight (or in hand) may still bring. `ahead` (a batch is in hand): a read
  /// smaller than a whole batch is not worth sending yet, 0. Successes of entries whose body
  /// went away are left to the completer (their provisional record is its to replace).
  std::size_t take_acks(std::vector<EntryKey>& out, std::size_t reserved, bool ahead = false);
  /// How many suspects the reclaimer may take now: at most `cap`, and none while earlier
  /// suspects still wait to run (a dead worker's backlog must not crowd out fresh work here
  /// while other consumers could share it).
  std::size_t reclaim_room(std::size_t cap);
  /// Ids of `stream` held now (scripts must not hand these out again).
  std::vector<std::string> held_ids(std::uint16_t stream);

  // ---- executor
  /// Blocks for the next runnable entry; nullopt once stop() was called. A suspect on its last
  /// chance is handed out only when no other suspect runs, and none beside it; entries whose lease was lost
  /// or whose body was found deleted meanwhile are skipped (counted in `skipped`). A fresh entry is marked
  /// running; a suspect is marked running by started().
  std::optional<Work> take();
  /// The start script allowed `key` to run, having raised its delivery count from
  /// `counted_from`. Skip when the entry is no longer held (its body went away meanwhile and
  /// it was dead-lettered); put_back when the consumer started to stop meanwhile: it is not
  /// started, and is released with its count restored.
  StartVerdict started(const EntryKey& key, std::int64_t counted_from);
  /// The entry will not run (another consumer owns it now, or its body is gone): counted as
  /// skipped, and forgotten unless its dead-letter record is still to be written.
  void not_run(const EntryKey& key, bool suspect);
  /// The handler of `w` is called next: less important entries may be handed out again (when
  /// `w` was taken with `gates` set; its completion or not_run() also lifts the gate). The
  /// task's `control` is kept while the entry is held: it is asked to stop at once when the
  /// consumer is stopping or the task was cancelled before its handler started, and later by
  /// stop() and cancel().
  void entering(const Work& w, const std::shared_ptr<TaskControl>& control);
  /// The handler finished; `c` goes to the completer (a success without a unique lock goes to
  /// the fetcher first, see take_acks); nullopt when the task was given up meanwhile (its
  /// completion went with give_up()). Then as take(), under the same lock.
  std::optional<Work> finish_and_take(std::optional<Completion> c, bool suspect);
  /// As finish_and_take(), without taking: an asynchronous handler (Consumer::on_async) ended,
  /// on a thread that is none of the handler threads.
  void finish(std::optional<Completion> c, bool suspect);
  /// Queues a tracked task's start mark for the completer (see StartMark).
  void mark_started(StartMark mark);
  /// Queues a task's reports for the completer, due `at` (see ReportBox); a box already
  /// queued is only made due sooner.
  void report_due(const std::shared_ptr<ReportBox>& box, Clock::time_point at);
  /// The watchdog gave up the running entry of delivery `seq` (c.key): `c` goes to the
  /// completer now, as if its handler had returned. False (nothing queued) when that delivery
  /// is no longer held and running.
  bool give_up(Completion c, std::uint64_t seq);

  /// Successes written by the fetcher (or refused for now: `retry` puts them back for the
  /// completer).
  void acks_written(const std::vector<EntryKey>& keys);
  void acks_refused(std::vector<EntryKey>& keys);

  // ---- completer
  /// What the completer writes next, besides completions.
  struct Writes {
    StartMarks marks;
    std::vector<std::shared_ptr<ReportBox>> reports;  // due ones
    bool empty() const { return marks.empty() && reports.empty(); }
  };
  /// Moves queued completions into `out`, start marks and due reports into `more` (appending):
  /// retries, dead letters, marks and reports soon (see flush_now), successes only when the
  /// fetcher has not taken them for a while (it is blocked on an empty stream). Waits until
  /// there are some, `until` passes, or stop_completer() was called. Returns false once
  /// stop_completer() was called.
  bool wait_completions(std::vector<Completion>& out, Writes& more, Clock::time_point until);
  /// Fate snapshot of each key, in order.
  std::vector<FateInfo> fates(const std::vector<Completion>& batch);
  /// The completions of these keys were written (or given up): forget the entries.
  void completed(const std::vector<EntryKey>& keys);
  /// A provisional dead-letter record was written for `key`: a running entry remembers it
  /// (its completion replaces it); one that never started is forgotten (it will not run: the
  /// record is its fate). True in that second case.
  bool orphaned(const EntryKey& key, std::string orphan_id);
  /// Wakes the completer so it exits once the queue is empty.
  void stop_completer();

  // ---- lease keeper
  /// Held entries of `stream` whose lease was last renewed at or before `due`, excluding lost
  /// and orphaned ones.
  std::vector<std::string> due_for_lease(std::uint16_t stream, Clock::time_point due);
  void renewed(std::uint16_t stream, const std::vector<std::string>& ids, Clock::time_point at);
  /// Held entries of `stream` with a provisional dead-letter record (their handler runs, or its
  /// completion is still to be written): the notes naming those records are renewed with the
  /// leases, so they outlive the holder by claim_min_idle at most.
  std::vector<std::string> noted(std::uint16_t stream);
  /// Another consumer owns these now, or they are no longer pending: not ours to run.
  /// Returns how many were newly marked.
  std::size_t lost(std::uint16_t stream, const std::vector<std::string>& ids);
  /// The fields of held entries whose body was found deleted, marked so that this is asked
  /// once per entry (null for entries no longer held, or whose handler has finished: their
  /// completion needs no body).
  std::vector<std::shared_ptr<const Fields>> gone(std::uint16_t stream, const std::vector<std::string>& ids);
  /// Queues a completion that no handler produced (an orphan record).
  void push(Completion c);
  /// What cancel() newly noticed: the controls of running tasks now asked to stop, and the
  /// tasks not started yet, now marked so that their handlers never run.
  struct Cancelled {
    struct Waiting {
      std::string entry_id;
      std::string task_id;  // (the entry id when its body names none)
    };
    std::vector<std::shared_ptr<TaskControl>> running;
    std::vector<Waiting> waiting;
  };
  /// An operator cancelled these held entries of `stream` (lease.lua or the cancel follower
  /// found their cancel requests): a running one is asked to stop, one not started yet when its
  /// handler would start. Returns what was not known before (a request found again is not).
  Cancelled cancel(std::uint16_t stream, const std::vector<std::string>& ids);
  /// The controls of the tasks whose handler runs now (for the renewal of their concurrency
  /// slots).
  std::vector<std::shared_ptr<TaskControl>> running_controls();
  /// The controls of those of `ids` (entries of `stream`) whose handler runs now.
  std::vector<std::shared_ptr<TaskControl>> running_controls(std::uint16_t stream,
                                                             const std::vector<std::string>& ids);
  /// Each running task: its control, and when its entry's lease was last renewed (nullopt when
  /// the entry is not leased: lost, or its body gone).
  std::vector<std::pair<std::shared_ptr<TaskControl>, std::optional<Clock::time_point>>> running_leases();
  /// When the entry `key`'s lease was last renewed, as running_leases() has it (nullopt: not
  /// held, or no longer leased).
  std::optional<Clock::time_point> lease_of(const EntryKey& key);
  /// Entries never started, for release at shutdown.
  std::vector<Unstarted> unstarted();

  // ---- shutdown
  /// Stop handing out work and fetching: take() and wait_for_room() return at once.
  void stop();
  /// Waits until no handler runs, `until` passes or end_idle_wait() is called; true when none
  /// runs.
  bool wait_idle(Clock::time_point until);
  /// Ends wait_idle() at once (the shutdown grace period was cut short).
  void end_idle_wait();
  std::size_t held_count();
  /// Handlers between take() and their completion.
  std::size_t running();
  /// Handlers waiting in take() for work.
  std::size_t idle_handlers();

 private:
  // finished: its handler returned; its completion is queued or being written. A body deleted
  // from then on needs no orphan record: the completion decides (its ack or move does not
  // need the body).
  enum class State : std::uint8_t { queued, taken, running, finished };
  struct Held {
    Clock::time_point lease_at;
    std::shared_ptr<const Fields> fields;
    std::string orphan_id;
    Origin origin = Origin::fresh;
    std::uint64_t seq = 0;
    std::int64_t restore_count = -1;       // see Unstarted::count
    std::shared_ptr<TaskControl> control;  // from entering() on
    State state = State::queued;
    bool lost = false;
    bool gone = false;
    bool cancel = false;  // an operator's cancel came before its handler started
  };
  using HeldMap = std::unordered_map<EntryKey, Held, EntryKeyHash>;

  std::optional<Work> take_locked(std::unique_lock<std::mutex>& lock);
  void finish_locked(std::optional<Completion> c, bool suspect);
  static std::optional<Clock::time_point> leased_at(const Held& h);
  std::deque<Work>::iterator next_runnable();
  /// A suspect whose start may be its last (max_deliveries): it runs alone among suspects.
  bool last_chance(const Work& w) const;
  void suspect_ended();                         // a suspect's handler is done (or it did not start)
  bool flush_now(Clock::time_point now) const;  // the completer should write what is queued now
  // (acks_ can name entries no longer held, e.g. lost ones: never below 0.)
  std::size_t unacked() const { return held_.size() > acks_.size() ? held_.size() - acks_.size() : 0; }
  void room_freed();  // after unacked() shrank; call with mutex_ held
  bool room_locked() const { return unacked() <= low_water_; }  // wait_for_room's condition
  /// Entries that may wait unstarted: the pace's, and one for each idle handler (it takes one
  /// at once). Call with mutex_ held.
  std::size_t may_wait() const { return pace_.cap() + idle_handlers_; }
  /// Fresh entries waiting to start (suspects, which may have to wait for each other, do not
  /// hold back reads of fresh work). Call with mutex_ held.
  std::size_t fresh_ready() const { return ready_.size() - suspects_ready_; }
  bool read_locked() const {  // wait_to_read's condition
    return room_locked() && StartPace::worth_reading(fresh_ready(), may_wait());
  }
  /// Whether `w` must wait for a more important entry taken before it (see Work::gates).
  bool gated(const Work& w) const;
  /// Lifts the gate of `key`, if it holds one; call with mutex_ held.
  void lift_gate(const EntryKey& key);

  const std::size_t prefetch_;
  const bool by_level_;
  const std::int64_t max_deliveries_;
  const std::size_t low_water_;    // the fetcher reads again once at most this many are held
  const std::size_t flush_batch_;  // completions worth a write even while handlers are busy
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable work_cv_;      // handlers: work queued, or stopping
  std::condition_variable done_cv_;      // completer: completions queued, or stopping
  std::condition_variable_any room_cv_;  // fetcher: room freed, an entry taken, or stopping
  StartPace pace_;                       // how many may wait unstarted
  bool reader_waiting_ = false;          // the fetcher waits in wait_to_read()
  std::condition_variable idle_cv_;      // shutdown: a handler finished
  std::condition_variable gate_cv_;      // handlers: a gate was lifted, or stopping
  HeldMap held_;
  std::deque<Work> ready_;
  std::size_t suspects_ready_ = 0;  // suspects among ready_
  std::vector<EntryKey> gates_;     // taken entries whose handler is not yet called (Work::gates)
  std::size_t gate_waiters_ = 0;
  std::vector<Completion> done_;  // retries, dead letters, orphans, refused successes
  std::vector<EntryKey> acks_;    // successes not yet taken by the fetcher or the completer
  StartMarks marks_;              // tracked tasks' starts, for the completer
  std::vector<std::pair<std::shared_ptr<ReportBox>, Clock::time_point>> reports_;  // and when due
  Clock::time_point acks_since_{};  // when acks_ last became non-empty
  std::size_t idle_handlers_ = 0;   // handlers waiting in take()
  std::size_t running_ = 0;         // handlers between take() and finish()/not_run()
  std::size_t suspects_running_ = 0;
  bool last_chance_running_ = false;
  bool completer_waiting_ = false;
  bool stopping_ = false;
  bool completer_stopping_ = false;
  bool idle_wait_ended_ = false;
  std::uint64_t next_seq_ = 0;
};

}  // namespace streamq::detail
