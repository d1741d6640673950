// SPDX-License-Identifier: MIT
// The Consumer: a reader thread (XREADGROUP), `concurrency` handler threads, and the thread
// that called run() as the control loop (acks, retries, dead letters, lease renewal,
// reclaiming, shutdown). Reader and control loop each own one connection.
#include "streamq/consumer.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "codec.hpp"
#include "connection.hpp"
#include "keys.hpp"
#include "log.hpp"
#include "scripts.hpp"
#include "signals.hpp"
#include "streamq/errors.hpp"

namespace streamq {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Argv;
using detail::Millis;
using detail::ReplyView;

// XCLAIM ... IDLE value that makes a released entry claimable by any reclaimer at once. It
// must stay below the server's epoch milliseconds (Redis clamps larger values to 0).
constexpr const char* kReleaseIdle = "100000000000";
constexpr std::size_t kFetchCount = 100;   // XAUTOCLAIM / replay batch (the server scans 10x)
constexpr std::size_t kLeaseChunk = 500;   // ids per lease script call
constexpr std::size_t kMaxFields = 1000;   // fields of a runnable entry, and kept in a dead letter
constexpr Millis kUnblockRetry{50};        // resend CLIENT UNBLOCK while the reader lingers
constexpr Millis kReclaimSoon{50};         // next reclaim when more may wait, or no room now

/// One delivered entry waiting for (or in) a handler.
struct Work {
  std::string id;
  Fields fields;
  std::int64_t deliveries = 1;
  bool has_body = true;
  bool reclaimed = false;  // from fetch_pending: the start script must count the attempt
};

enum class Outcome { ack, retry, dead_letter };

/// What the control loop must write for one finished entry.
struct Completion {
  std::string id;
  Outcome outcome = Outcome::ack;
  Fields fields;  // the retry copy or the dead-letter entry
};

/// An entry this consumer holds (queued, running, or awaiting its ack).
struct Held {
  Clock::time_point lease_at;
  bool fresh = true;     // delivered by XREADGROUP >: its delivery count of 1 is this delivery
  bool started = false;  // a handler took it
  bool lost = false;     // the lease check found another owner, or its body gone
};

std::string default_consumer_name() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "host");
  std::random_device rd;
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return std::string(host) + "-" + std::to_string(getpid()) + "-" + suffix;
}

ConsumerOptions validated(ConsumerOptions o) {
  if (o.stream.empty()) throw ConfigError("stream must not be empty");
  if (o.group.empty()) throw ConfigError("group must not be empty");
  if (o.consumer_name.empty()) o.consumer_name = default_consumer_name();
  if (o.concurrency < 1) throw ConfigError("concurrency must be >= 1");
  if (o.prefetch < o.concurrency) throw ConfigError("prefetch must be >= concurrency");
  if (o.block.count() < 1) throw ConfigError("block must be >= 1 ms");
  if (o.connection.socket_timeout < o.block + Millis(1000)) {
    // A socket timeout shorter than BLOCK fails the read while the server keeps the client
    // blocked: an entry added then is delivered to a reader that is gone ("phantom delivery").
    throw ConfigError("connection.socket_timeout must be >= block + 1000 ms");
  }
  if (o.heartbeat_interval.count() < 1) throw ConfigError("heartbeat_interval must be >= 1 ms");
  if (o.claim_min_idle < 3 * o.heartbeat_interval) {
    throw ConfigError("claim_min_idle must be >= 3 * heartbeat_interval");
  }
  if (o.reclaim_interval.count() < 1) throw ConfigError("reclaim_interval must be >= 1 ms");
  // 2 at least: every entry a crashed worker held is charged its one delivery, started or not.
  if (o.max_deliveries < 2) throw ConfigError("max_deliveries must be >= 2");
  if (o.shutdown_grace.count() < 0) throw ConfigError("shutdown_grace must be >= 0");
  if (o.max_payload_bytes == 0) throw ConfigError("max_payload_bytes must be > 0");
  if (o.max_payload_depth < 1) throw ConfigError("max_payload_depth must be >= 1");
  if (o.default_max_retries < 0) throw ConfigError("default_max_retries must be >= 0");
  return o;
}

/// Reads [f1, v1, f2, v2, ...] into fields; false when the array is malformed.
bool read_fields(ReplyView v, Fields& out) {
  if (!v.is_array() || v.size() % 2 != 0) return false;
  const std::size_t n = v.size();
  out.reserve(n / 2);
  for (std::size_t i = 0; i < n; i += 2) {
    if (!v[i].is_string() || !v[i + 1].is_string()) return false;
    out.emplace_back(v[i].str(), v[i + 1].str());
  }
  return true;
}

/// Reads one [id, fields-or-nil] entry.
Work read_entry(ReplyView e, std::int64_t deliveries) {
  Work w;
  w.id = std::string(e[0].str());
  w.deliveries = deliveries;
  if (e[1].is_nil() || !read_fields(e[1], w.fields)) {
    w.fields.clear();
    w.has_body = false;
  }
  return w;
}

void set_field(Fields& fields, std::string_view name, std::string value) {
  for (auto& [k, v] : fields) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  fields.emplace_back(name, std::move(value));
}

}  // namespace

struct Consumer::Impl {
  explicit Impl(ConsumerOptions o)
      : opt(validated(std::move(o))),
        keys(detail::queue_keys(opt.stream)),
        limits{opt.max_payload_bytes, opt.max_payload_depth, opt.default_max_retries},
        reader_conn(detail::make_connection_config(opt.connection, "consumer")),
        control_conn(detail::make_connection_config(opt.connection, "consumer")),
        reader_scripts(reader_conn),
        control_scripts(control_conn),
        block_text(std::to_string(opt.block.count())),
        min_idle_text(std::to_string(opt.claim_min_idle.count())),
        max_deliveries_text(std::to_string(opt.max_deliveries)) {}

  // ---- configuration (immutable once run() started) ----
  ConsumerOptions opt;
  detail::QueueKeys keys;
  detail::DecodeLimits limits;
  std::unordered_map<std::string, Handler> handlers;
  Handler fallback;

  // ---- connections: each used by one thread only ----
  detail::Connection reader_conn;   // reader thread
  detail::Connection control_conn;  // run() thread
  detail::ScriptRunner reader_scripts;
  detail::ScriptRunner control_scripts;
  std::string block_text, min_idle_text, max_deliveries_text;

  // ---- shared state, guarded by mutex ----
  std::mutex mutex;
  std::condition_variable work_cv;     // handlers: work queued, or stopping
  std::condition_variable control_cv;  // control: completions, reader/handlers exited, stop
  std::condition_variable reader_cv;   // reader: capacity freed, or stopping
  std::deque<Work> queue;
  std::unordered_map<std::string, Held> held;
  std::vector<Completion> completions;
  bool stopping = false;
  bool suspect_running = false;  // a reclaimed entry is running (see next_runnable)
  bool control_waiting = false;
  bool reader_done = false;
  int handlers_alive = 0;

  std::atomic<bool> stop_requested{false};
  std::atomic<bool> replayed_once{false};  // the reader finished its first own-PEL replay
  std::atomic<std::int64_t> reader_client_id{-1};
  bool started = false;
  std::thread reader_thread;
  std::vector<std::thread> handler_threads;

  struct {
    std::atomic<std::uint64_t> done{0}, retried{0}, dead_lettered{0}, reclaimed{0}, stale{0},
        reconnects{0};
  } m;

  // ------------------------------------------------------------------ shared helpers

  void request_stop() noexcept {
    stop_requested.store(true);
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    work_cv.notify_all();
    control_cv.notify_all();
    reader_cv.notify_all();
  }

  /// Waits `delay` unless stop() comes first; returns false when stopping.
  bool pause(std::condition_variable& cv, Millis delay) {
    std::unique_lock lock(mutex);
    return !cv.wait_for(lock, delay, [&] { return stopping; });
  }

  std::vector<std::string> held_ids() {
    std::lock_guard lock(mutex);
    std::vector<std::string> ids;
    ids.reserve(held.size());
    for (const auto& [id, h] : held) ids.push_back(id);
    return ids;
  }

  /// Hands entries to the handlers; entries already held are not handed out twice.
  /// Returns how many were queued.
  std::size_t deliver(std::vector<Work>&& works) {
    if (works.empty()) return 0;
    const auto now = Clock::now();
    std::size_t queued = 0;
    {
      std::lock_guard lock(mutex);
      for (Work& w : works) {
        if (held.try_emplace(w.id, Held{now, !w.reclaimed}).second) {
          queue.push_back(std::move(w));
          ++queued;
        }
      }
    }
    if (queued == 1) work_cv.notify_one();
    else if (queued > 1) work_cv.notify_all();
    return queued;
  }

  /// XGROUP CREATE <stream> <group> 0 MKSTREAM; an existing group is fine.
  void ensure_group(detail::Connection& conn) {
    const detail::Reply r = conn.command(Argv{"XGROUP", "CREATE", keys.stream, opt.group, "0", "MKSTREAM"});
    if (r.view().is_error() && !r.view().error().starts_with("BUSYGROUP")) r.view().check();
  }

  /// One fetch_pending call: "auto" reclaims idle entries of any consumer from `cursor`,
  /// "own" replays this consumer's pending entries after `cursor`. Returns the next cursor.
  std::string fetch_pending(detail::ScriptRunner& scripts, const char* mode, const std::string& cursor,
                            std::size_t count, std::vector<Work>& out) {
    const std::vector<std::string> running = held_ids();
    const std::string failed_at = detail::format_timestamp(std::chrono::system_clock::now());
    Argv argv = scripts.begin(detail::ScriptId::fetch_pending, 2);
    argv.add(keys.stream).add(keys.dlq);
    argv.add(opt.group).add(opt.consumer_name).add(mode).add(cursor);
    argv.add(static_cast<std::int64_t>(count)).add(min_idle_text).add(max_deliveries_text).add(failed_at);
    for (const auto& id : running) argv.add(id);
    const detail::Reply reply = scripts.call(detail::ScriptId::fetch_pending, argv);
    const ReplyView r = reply.view().check();
    const ReplyView entries = r[1];
    for (std::size_t i = 0; i < entries.size(); ++i) {
      out.push_back(read_entry(entries[i], entries[i][2].integer()));
      out.back().reclaimed = true;
    }
    const std::int64_t dead = r[2].integer();
    if (dead > 0) {
      m.dead_lettered += static_cast<std::uint64_t>(dead);
      detail::log(LogLevel::warning, std::to_string(dead) + " pending entries of " + keys.stream +
                                         " dead-lettered (body lost, or started " + max_deliveries_text +
                                         " times without finishing)");
    }
    return std::string(r[0].str());
  }

  // ------------------------------------------------------------------ reader thread

  /// Replays this consumer's own pending entries (start, reconnect): they were delivered to
  /// this name before and nobody else will run them until they idle past claim_min_idle.
  void replay_own() {
    std::string cursor = "-";
    while (!stop_requested.load()) {
      std::vector<Work> works;
      const std::string next = fetch_pending(reader_scripts, "own", cursor, kFetchCount, works);
      if (const std::size_t n = deliver(std::move(works)); n > 0) {
        m.reclaimed += n;
        detail::log(LogLevel::info, "replaying " + std::to_string(n) + " pending entries of consumer " +
                                        opt.consumer_name);
      }
      if (next == "0-0" || next == cursor) break;
      cursor = next;
    }
    if (!replayed_once.load()) {
      {
        std::lock_guard lock(mutex);  // the control loop waits on this flag under the mutex
        replayed_once = true;
      }
      control_cv.notify_all();
    }
  }

  /// Blocks until there is room for at least half the prefetch (or stop); returns the count
  /// to read, 0 when stopping.
  std::size_t wait_for_room() {
    const std::size_t prefetch = static_cast<std::size_t>(opt.prefetch);
    const std::size_t low_water = prefetch - std::max<std::size_t>(1, prefetch / 2);
    std::unique_lock lock(mutex);
    reader_cv.wait(lock, [&] { return stopping || held.size() <= low_water; });
    return stopping ? 0 : prefetch - held.size();
  }

  void reader_main() {
    std::uint64_t replayed_generation = 0;
    detail::Backoff error_backoff(opt.connection.backoff_base, opt.connection.backoff_max);
    Argv read;
    while (!stop_requested.load()) {
      try {
        if (!reader_conn.connected()) {
          reader_conn.connect();
          reader_client_id.store(reader_conn.client_id());
        }
        if (reader_conn.generation() != replayed_generation) {
          replay_own();
          replayed_generation = reader_conn.generation();
        }
        const std::size_t count = wait_for_room();
        if (count == 0) break;
        read.clear();
        read.add("XREADGROUP").add("GROUP").add(opt.group).add(opt.consumer_name);
        read.add("COUNT").add(static_cast<std::int64_t>(count)).add("BLOCK").add(block_text);
        read.add("STREAMS").add(keys.stream).add(">");
        const detail::Reply reply = reader_conn.command(read);
        const ReplyView r = reply.view();
        if (r.is_error()) {
          const std::string_view err = r.error();
          if (err.starts_with("NOGROUP") || err.starts_with("UNBLOCKED")) {
            // The stream or the group was deleted: recreate at 0 so nothing added afterwards
            // is skipped. This is data loss someone caused; say so.
            detail::log(LogLevel::warning, "consumer group " + opt.group + " on " + keys.stream +
                                               " is gone (" + std::string(err) + "); recreating it");
            error_backoff.fail();
            if (!pause(reader_cv, error_backoff.delay())) break;
            ensure_group(reader_conn);
            continue;
          }
          r.check();
        }
        error_backoff.reset();
        if (r.is_nil()) continue;  // BLOCK timed out, or CLIENT UNBLOCK from stop()
        const ReplyView entries = r[0][1];
        std::vector<Work> works;
        works.reserve(entries.size());
        for (std::size_t i = 0; i < entries.size(); ++i) works.push_back(read_entry(entries[i], 1));
        deliver(std::move(works));
      } catch (const ConnectionError& e) {
        if (stop_requested.load()) break;
        m.reconnects += 1;
        detail::log(LogLevel::warning, std::string("reader: ") + e.what() + "; reconnecting");
        if (!pause(reader_cv, reader_conn.backoff_delay())) break;
      } catch (const std::exception& e) {
        // Server-side trouble (LOADING after a restart, NOPERM, a failing script): back off
        // rather than spin, and keep going.
        detail::log(LogLevel::error, std::string("reader: ") + e.what());
        error_backoff.fail();
        if (!pause(reader_cv, error_backoff.delay())) break;
      }
    }
    std::lock_guard lock(mutex);
    reader_done = true;
    control_cv.notify_all();
  }

  // ------------------------------------------------------------------ handler threads

  Fields dead_letter_fields(const Fields& original, const std::string& id, std::string_view reason,
                            std::string error) const {
    Fields f;
    f.reserve(std::min(original.size(), kMaxFields) + 6);
    std::size_t dropped = 0;
    for (const auto& kv : original) {
      const std::string& k = kv.first;
      if (k == field::error || k == field::failed_at || k == field::original_id || k == field::consumer ||
          k == field::reason) {
        continue;
      }
      if (f.size() == kMaxFields) {
        ++dropped;  // Lua's stack cannot pass ~8000 arguments to one XADD
        continue;
      }
      f.push_back(kv);
    }
    if (dropped > 0) f.emplace_back("fields_dropped", std::to_string(dropped));
    f.emplace_back(field::error, std::move(error));
    f.emplace_back(field::failed_at, detail::format_timestamp(std::chrono::system_clock::now()));
    f.emplace_back(field::original_id, id);
    f.emplace_back(field::consumer, opt.consumer_name);
    f.emplace_back(field::reason, reason);
    return f;
  }

  Completion dead_letter(const Fields& fields, const std::string& id, std::string_view reason,
                         std::string error) const {
    if (detail::log_enabled(LogLevel::warning)) {
      detail::log(LogLevel::warning, "dead-lettering entry " + id + " of " + keys.stream + " (" +
                                         std::string(reason) + "): " + error);
    }
    return Completion{id, Outcome::dead_letter, dead_letter_fields(fields, id, reason, std::move(error))};
  }

  Completion failed(const Task& task, std::string error) const {
    if (task.retry_count() >= task.max_retries()) {
      return dead_letter(task.fields(), task.entry_id(), "retries_exhausted", std::move(error));
    }
    if (detail::log_enabled(LogLevel::info)) {
      detail::log(LogLevel::info, "task " + task.id() + " (" + task.type() + ") failed, retry " +
                                      std::to_string(task.retry_count() + 1) + " of " +
                                      std::to_string(task.max_retries()) + ": " + error);
    }
    Fields copy = task.fields();
    set_field(copy, field::retry_count, std::to_string(task.retry_count() + 1));
    set_field(copy, field::last_error, std::move(error));
    return Completion{task.entry_id(), Outcome::retry, std::move(copy)};
  }

  Completion process(Work& w) const {
    if (!w.has_body) {
      return dead_letter({}, w.id, "body_lost", "body lost: the entry was trimmed or deleted before it ran");
    }
    if (w.fields.size() > kMaxFields) {
      return dead_letter(w.fields, w.id, "malformed",
                         "entry has " + std::to_string(w.fields.size()) + " fields (limit " +
                             std::to_string(kMaxFields) + ")");
    }
    detail::Decoded decoded = detail::decode_task(w.id, w.fields, w.deliveries, limits);
    if (auto* reason = std::get_if<std::string>(&decoded)) {
      return dead_letter(w.fields, w.id, "malformed", std::move(*reason));
    }
    const Task& task = std::get<Task>(decoded);
    const Handler* handler = nullptr;
    if (auto it = handlers.find(task.type()); it != handlers.end()) handler = &it->second;
    else if (fallback) handler = &fallback;
    if (handler == nullptr) {
      return dead_letter(task.fields(), task.entry_id(), "no_handler",
                         "no handler for task type \"" + task.type() + "\"");
    }
    try {
      (*handler)(task);
      return Completion{task.entry_id(), Outcome::ack, {}};
    } catch (const PermanentError& e) {
      return dead_letter(task.fields(), task.entry_id(), "permanent", e.what());
    } catch (const std::exception& e) {
      return failed(task, e.what());
    } catch (...) {
      return failed(task, "unknown exception");
    }
  }

  /// Counts the attempt before a reclaimed or replayed entry runs (owner-checked XCLAIM
  /// RETRYCOUNT), so the poison check sees how often it was started, not how often it was
  /// merely prefetched by workers that died. False when another consumer owns it now.
  /// Uses this handler thread's own connection, made on first need (reclaims are rare).
  bool start_reclaimed(Work& w, std::unique_ptr<detail::Connection>& conn) {
    try {
      if (!conn) conn = std::make_unique<detail::Connection>(reader_conn.config());
      detail::ScriptRunner scripts(*conn);
      Argv argv = scripts.begin(detail::ScriptId::start, 1);
      argv.add(keys.stream).add(opt.group).add(opt.consumer_name).add(w.id).add(w.deliveries + 1);
      const detail::Reply r = scripts.call(detail::ScriptId::start, argv);
      if (r.view().check().integer() == 0) {
        detail::log(LogLevel::warning, "entry " + w.id + " was taken by another consumer before it started");
        return false;
      }
    } catch (const std::exception& e) {
      // Running it anyway keeps at-least-once; only this attempt goes uncounted.
      detail::log(LogLevel::warning, "could not count the start of entry " + w.id + ": " + e.what());
    }
    w.deliveries += 1;
    return true;
  }

  /// The next entry a handler may take. Reclaimed or replayed entries are suspects (the
  /// worker that held them may have died running one of them), so they run one at a time:
  /// a task that kills its worker then takes no other reclaimed task down with it, and
  /// innocent entries are not charged again and again for its crashes. Fresh entries run
  /// freely beside them. Call with the mutex held.
  std::deque<Work>::iterator next_runnable() {
    if (!suspect_running) return queue.begin();
    return std::find_if(queue.begin(), queue.end(), [](const Work& w) { return !w.reclaimed; });
  }

  void handler_main() {
    std::unique_ptr<detail::Connection> start_conn;
    std::optional<Completion> done;
    bool suspect = false;  // this thread runs the one suspect allowed at a time
    std::unique_lock lock(mutex);
    for (;;) {
      if (done) {
        completions.push_back(std::move(*done));
        done.reset();
        if (control_waiting) control_cv.notify_one();
      }
      if (suspect) {
        suspect = suspect_running = false;
        work_cv.notify_all();  // another suspect may go now
      }
      work_cv.wait(lock, [&] { return stopping || next_runnable() != queue.end(); });
      if (stopping) break;  // queued entries stay pending; the control loop releases them
      const auto next = next_runnable();
      Work w = std::move(*next);
      queue.erase(next);
      if (auto it = held.find(w.id); it != held.end() && it->second.lost) {
        held.erase(it);  // another consumer owns it now: not ours to run
        m.stale += 1;
        reader_cv.notify_one();
        continue;
      }
      suspect = suspect_running = w.reclaimed;
      if (auto it = held.find(w.id); it != held.end()) it->second.started = true;
      lock.unlock();
      const bool ours = !w.reclaimed || start_reclaimed(w, start_conn);
      if (ours) done = process(w);
      lock.lock();
      if (!ours) {
        held.erase(w.id);
        m.stale += 1;
        reader_cv.notify_one();
      }
    }
    if (suspect) suspect_running = false;
    --handlers_alive;
    control_cv.notify_all();
  }

  // ------------------------------------------------------------------ control loop

  /// Writes a batch of completions: one multi-id XACK and XDEL for the successes, one
  /// owner-checked move script per retry or dead letter, all in one pipeline.
  void flush(std::vector<Completion>& batch) {
    if (batch.empty()) return;
    std::vector<Argv> argvs;
    std::vector<detail::ScriptId> ids;
    // A success is final even if the entry's lease was lost meanwhile: the task is done, and
    // the new owner's own completion of it then finds nothing to do.
    std::vector<std::size_t> acks;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].outcome == Outcome::ack) acks.push_back(i);
    }
    if (!acks.empty()) {
      // MULTI: a crash between XACK and XDEL would leave a done entry counting toward max_len.
      Argv ack{"XACK", keys.stream, opt.group};
      Argv del{"XDEL", keys.stream};
      for (std::size_t i : acks) {
        ack.add(batch[i].id);
        del.add(batch[i].id);
      }
      argvs.push_back(Argv{"MULTI"});
      argvs.push_back(std::move(ack));
      argvs.push_back(std::move(del));
      argvs.push_back(Argv{"EXEC"});
      ids.insert(ids.end(), 4, detail::not_a_script);
    }
    std::vector<std::size_t> moves;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Completion& c = batch[i];
      if (c.outcome == Outcome::ack) continue;
      Argv argv = control_scripts.begin(detail::ScriptId::move, 2);
      argv.add(keys.stream).add(c.outcome == Outcome::retry ? keys.stream : keys.dlq);
      argv.add(opt.group).add(opt.consumer_name).add(c.id).add("0");
      for (const auto& [k, v] : c.fields) argv.add(k).add(v);
      argvs.push_back(std::move(argv));
      ids.push_back(detail::ScriptId::move);
      moves.push_back(i);
    }
    const std::vector<detail::Reply> replies = control_scripts.call_pipelined(ids, argvs);
    std::size_t r = 0;
    if (!acks.empty()) {
      for (int k = 0; k < 4; ++k, ++r) {
        if (replies[r].view().is_error()) {
          detail::log(LogLevel::error, "acknowledging completed entries: " + std::string(replies[r].view().error()));
        }
      }
      m.done += acks.size();
    }
    for (std::size_t i : moves) {
      const ReplyView v = replies[r++].view();
      const Completion& c = batch[i];
      if (v.is_error()) {
        detail::log(LogLevel::error, "moving entry " + c.id + ": " + std::string(v.error()) +
                                         "; it stays pending and will be reclaimed");
      } else if (v.is_integer()) {
        m.stale += 1;  // not pending any more, or another consumer owns it: not ours to move
        detail::log(LogLevel::warning, "entry " + c.id + (v.integer() == detail::move_not_owner
                                                              ? " was reclaimed by another consumer"
                                                              : " is no longer pending") +
                                           "; its retry/dead-letter was not written");
      } else if (c.outcome == Outcome::retry) {
        m.retried += 1;
      } else {
        m.dead_lettered += 1;
      }
    }
    std::lock_guard lock(mutex);
    for (const Completion& c : batch) held.erase(c.id);
    batch.clear();
    reader_cv.notify_one();
  }

  /// Renews (idle "0") or releases (kReleaseIdle) the leases of `ids`, setting their delivery
  /// count to `count` unless it is "-1"; marks lost ones.
  void lease(const std::vector<std::string>& ids, const char* idle, const char* count = "-1") {
    for (std::size_t first = 0; first < ids.size(); first += kLeaseChunk) {
      const std::size_t last = std::min(ids.size(), first + kLeaseChunk);
      Argv argv = control_scripts.begin(detail::ScriptId::lease, 1);
      argv.add(keys.stream).add(opt.group).add(opt.consumer_name).add(idle).add(count);
      for (std::size_t i = first; i < last; ++i) argv.add(ids[i]);
      const detail::Reply reply = control_scripts.call(detail::ScriptId::lease, argv);
      const ReplyView lost = reply.view().check();
      const auto now = Clock::now();
      std::lock_guard lock(mutex);
      for (std::size_t i = first; i < last; ++i) {
        if (auto it = held.find(ids[i]); it != held.end()) it->second.lease_at = now;
      }
      for (std::size_t i = 0; i < lost.size(); ++i) {
        if (auto it = held.find(std::string(lost[i].str())); it != held.end() && !it->second.lost) {
          it->second.lost = true;
          detail::log(LogLevel::warning, "lost entry " + it->first +
                                             ": another consumer took it, or its body was trimmed");
        }
      }
    }
  }

  /// Renews every lease older than half an interval, so with one tick per interval no lease
  /// is ever older than about one interval plus the time a tick takes.
  void heartbeat() {
    const auto due = Clock::now() - opt.heartbeat_interval / 2;
    std::vector<std::string> ids;
    {
      std::lock_guard lock(mutex);
      for (const auto& [id, h] : held) {
        if (!h.lost && h.lease_at <= due) ids.push_back(id);
      }
    }
    lease(ids, "0");
  }

  /// Takes stalled entries of other consumers; returns true when it should run again soon:
  /// more may be waiting, or there was no room this time.
  bool reclaim(std::string& cursor) {
    // Reclaimed entries run one at a time (next_runnable), so take no more than the handler
    // threads, and none while earlier ones still wait: a dead worker's backlog must not
    // crowd out fresh work here while other consumers could share it.
    std::size_t room;
    {
      std::lock_guard lock(mutex);
      const auto prefetch = static_cast<std::size_t>(opt.prefetch);
      const bool suspects_waiting =
          std::any_of(queue.begin(), queue.end(), [](const Work& w) { return w.reclaimed; });
      room = held.size() < prefetch && !suspects_waiting
                 ? std::min({kFetchCount, prefetch - held.size(), static_cast<std::size_t>(opt.concurrency)})
                 : 0;
    }
    if (room == 0) return true;
    std::vector<Work> works;
    cursor = fetch_pending(control_scripts, "auto", cursor, room, works);
    if (const std::size_t n = deliver(std::move(works)); n > 0) {
      m.reclaimed += n;
      detail::log(LogLevel::info, "reclaimed " + std::to_string(n) + " stalled entries of " + keys.stream);
    }
    return cursor != "0-0";
  }

  void control_main() {
    std::vector<Completion> batch;
    std::string cursor = "0-0";
    auto next_heartbeat = Clock::now() + opt.heartbeat_interval;
    auto next_reclaim = Clock::now();
    std::optional<Clock::time_point> grace_end;
    bool reclaim_armed = false;  // the first replay had finished when we last looked
    Clock::time_point next_unblock{};
    for (;;) {
      bool finished = false;
      bool reader_lingers = false;
      {
        std::unique_lock lock(mutex);
        auto wake = replayed_once.load() ? std::min(next_heartbeat, next_reclaim) : next_heartbeat;
        if (stopping) wake = std::min(wake, Clock::now() + kUnblockRetry);
        control_waiting = true;
        control_cv.wait_until(lock, wake, [&] {
          return !completions.empty() || (stopping && !grace_end) || (replayed_once.load() && !reclaim_armed) ||
                 (stopping && reader_done && handlers_alive == 0);
        });
        control_waiting = false;
        reclaim_armed = replayed_once.load();
        if (batch.empty()) batch.swap(completions);
        else std::move(completions.begin(), completions.end(), std::back_inserter(batch)), completions.clear();
        if (stopping && !grace_end) grace_end = Clock::now() + opt.shutdown_grace;
        finished = stopping && reader_done && handlers_alive == 0 && completions.empty();
        reader_lingers = stopping && !reader_done;
      }
      try {
        if (!control_conn.connected()) control_conn.connect();
        const auto now = Clock::now();
        if (reader_lingers && now >= next_unblock) {
          // Wake the reader from its BLOCK now rather than after up to `block` ms.
          const std::int64_t reader_id = reader_client_id.load();
          if (reader_id >= 0) control_conn.command(Argv{"CLIENT", "UNBLOCK"}.add(reader_id));
          next_unblock = now + kUnblockRetry;
        }
        flush(batch);
        if (now >= next_heartbeat) {
          heartbeat();
          next_heartbeat = now + opt.heartbeat_interval;
        }
        // Reclaiming waits for the first replay of this consumer's own entries, or both would
        // fetch the entries a previous run under this name left behind.
        if (!stopping_now() && replayed_once.load() && now >= next_reclaim) {
          const bool soon = reclaim(cursor);
          next_reclaim = now + (soon ? std::min(kReclaimSoon, opt.reclaim_interval) : opt.reclaim_interval);
        }
      } catch (const ConnectionError& e) {
        m.reconnects += 1;
        detail::log(LogLevel::warning, std::string("control: ") + e.what() + "; reconnecting");
        back_off(control_conn.backoff_delay());
      } catch (const std::exception& e) {
        detail::log(LogLevel::error, std::string("control: ") + e.what());
        back_off(Millis(200));
      }
      if (finished && batch.empty()) break;
      if (grace_end && Clock::now() >= *grace_end) {
        detail::log(LogLevel::warning, "shutdown grace period over with handlers still running");
        break;
      }
    }
    release_held(batch);
  }

  /// The control loop's wait after an error. While stopping it still waits (a short while),
  /// so a Redis that is down during shutdown is not hammered until the grace period ends.
  void back_off(Millis delay) {
    std::unique_lock lock(mutex);
    if (stopping) {
      control_cv.wait_for(lock, std::clamp(delay, Millis(10), Millis(100)));
    } else {
      control_cv.wait_for(lock, delay, [&] { return stopping; });
    }
  }

  bool stopping_now() {
    std::lock_guard lock(mutex);
    return stopping;
  }

  /// At exit: completions still arriving are flushed; entries never started (queued) are
  /// released so another consumer takes them now rather than after claim_min_idle, and those
  /// delivered fresh get their delivery back (count 0: they never ran). Entries whose handler
  /// outlived the grace period are not released: their lease runs out after claim_min_idle,
  /// which is as long as another consumer would have waited had this one crashed.
  void release_held(std::vector<Completion>& batch) {
    try {
      {
        std::lock_guard lock(mutex);
        std::move(completions.begin(), completions.end(), std::back_inserter(batch));
        completions.clear();
      }
      if (!control_conn.connected()) control_conn.connect();
      flush(batch);
      std::vector<std::string> fresh, reclaimed;
      {
        std::lock_guard lock(mutex);
        for (const auto& [id, h] : held) {
          if (h.lost || h.started) continue;
          (h.fresh ? fresh : reclaimed).push_back(id);
        }
      }
      lease(fresh, kReleaseIdle, "0");
      lease(reclaimed, kReleaseIdle);
      if (const std::size_t n = fresh.size() + reclaimed.size(); n > 0) {
        detail::log(LogLevel::info, "released " + std::to_string(n) + " unstarted entries for other consumers");
      }
    } catch (const std::exception& e) {
      detail::log(LogLevel::warning, std::string("shutdown: ") + e.what() +
                                         "; unfinished entries stay pending until reclaimed");
    }
  }

  // ------------------------------------------------------------------ run

  /// Connects and creates the group, retrying connection failures until stop().
  bool set_up() {
    detail::Backoff start_backoff(opt.connection.backoff_base, opt.connection.backoff_max);
    for (;;) {
      try {
        control_conn.connect();
        ensure_group(control_conn);
        return true;
      } catch (const ConnectionError& e) {
        m.reconnects += 1;
        detail::log(LogLevel::warning, std::string("start: ") + e.what() + "; retrying");
        if (!pause(control_cv, control_conn.backoff_delay())) return false;
      } catch (const ReplyError& e) {
        // A loading, full or failing-over server gets better; a wrong password does not.
        static constexpr std::string_view transient[] = {"LOADING", "OOM", "READONLY", "MASTERDOWN",
                                                          "BUSY", "TRYAGAIN", "CLUSTERDOWN"};
        if (std::find(std::begin(transient), std::end(transient), e.prefix()) == std::end(transient)) throw;
        detail::log(LogLevel::warning, std::string("start: ") + e.what() + "; retrying");
        start_backoff.fail();
        if (!pause(control_cv, start_backoff.delay())) return false;
      }
    }
  }

  void join_finished_threads() {
    if (reader_thread.joinable()) reader_thread.join();
    bool all_done;
    {
      std::lock_guard lock(mutex);
      all_done = handlers_alive == 0;
    }
    if (all_done) {
      for (auto& t : handler_threads) {
        if (t.joinable()) t.join();
      }
    }
  }

  void run() {
    if (started) throw ConfigError("Consumer::run() can be called only once");
    started = true;
    if (stop_requested.load()) return;
    std::optional<detail::SignalRegistration> signals;
    if (opt.stop_on_signals) signals.emplace([this] { request_stop(); });
    if (!set_up()) return;
    handlers_alive = opt.concurrency;
    reader_thread = std::thread([this] { reader_main(); });
    for (int i = 0; i < opt.concurrency; ++i) handler_threads.emplace_back([this] { handler_main(); });
    detail::log(LogLevel::info, "consumer " + opt.consumer_name + " running on " + keys.stream +
                                    " (group " + opt.group + ", " + std::to_string(opt.concurrency) +
                                    " handler threads)");
    control_main();
    join_finished_threads();
  }

  ~Impl() {
    request_stop();
    if (reader_thread.joinable()) reader_thread.join();
    for (auto& t : handler_threads) {
      if (t.joinable()) t.join();
    }
  }
};

Consumer::Consumer(ConsumerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Consumer::~Consumer() = default;
Consumer::Consumer(Consumer&&) noexcept = default;
Consumer& Consumer::operator=(Consumer&&) noexcept = default;

void Consumer::on(std::string task_type, Handler handler) {
  if (impl_->started) throw ConfigError("handlers must be registered before run()");
  if (task_type.empty()) throw ConfigError("task_type must not be empty");
  if (!handler) throw ConfigError("handler for \"" + task_type + "\" is empty");
  if (!impl_->handlers.emplace(task_type, std::move(handler)).second) {
    throw ConfigError("a handler for \"" + task_type + "\" is already registered");
  }
}

void Consumer::on_unknown(Handler handler) {
  if (impl_->started) throw ConfigError("handlers must be registered before run()");
  impl_->fallback = std::move(handler);
}

void Consumer::run() { impl_->run(); }
void Consumer::stop() noexcept { impl_->request_stop(); }
const std::string& Consumer::name() const noexcept { return impl_->opt.consumer_name; }

ConsumerMetrics Consumer::metrics() const noexcept {
  const auto& m = impl_->m;
  return ConsumerMetrics{m.done.load(), m.retried.load(), m.dead_lettered.load(),
                         m.reclaimed.load(), m.stale.load(), m.reconnects.load()};
}

}  // namespace streamq
