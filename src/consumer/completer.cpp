// SPDX-License-Identifier: MIT
#include "completer.hpp"

#include <algorithm>
#include <iterator>
#include <unordered_map>

#include "log.hpp"
#include "redis/error_code.hpp"
#include "report_box.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/fate_args.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {
namespace {

constexpr Millis kRetryMax{2000};  // longest wait before a refused write is tried again
// Entries per running or done script call: enough to spread a call's cost, few enough that
// Redis, which runs nothing else meanwhile, is not held for long (about 2 ms at most).
constexpr std::size_t kPerScript = 128;

/// How one completion is written.
enum class Write { ack, done, move, replace, orphan, none };

/// The pipeline of one flush and where each completion's reply is.
struct Plan {
  std::vector<Argv> argvs;
  std::vector<ScriptId> ids;
  std::vector<Write> write;        // per completion
  std::vector<std::size_t> reply;  // per completion: index of its reply (ack: of EXEC)
  std::vector<AckSpan> multis;     // where each acknowledgement block is
  // Each running script call: its reply's index and how many marks it writes; `marks` holds
  // their indexes in the flush's marks, call after call.
  std::vector<std::pair<std::size_t, std::size_t>> starts;
  std::vector<std::size_t> marks;
  // Each report call: the index of its box in the flush's reports, and of its reply.
  std::vector<std::pair<std::size_t, std::size_t>> report_at;

  void add(Argv argv, ScriptId id) {
    argvs.push_back(std::move(argv));
    ids.push_back(id);
  }
};

}  // namespace

bool acks_in_multi(const Shared& s) {
  return Clock::now().time_since_epoch().count() >=
         s.acks_without_multi_until.load(std::memory_order_relaxed);
}

AckSpan append_acks(std::vector<Argv>& argvs, const Shared& s, std::uint16_t stream,
                    const std::vector<std::string_view>& ids, const OrphanAcks& orphans,
                    const std::vector<const UniqueLock*>& locks, bool transaction) {
  const QueueKeys& keys = s.keys(stream);
  const std::size_t first = argvs.size();
  if (transaction) argvs.push_back(Argv{"MULTI"});
  if (!ids.empty()) {
    Argv ack{"XACK", keys.stream, s.opt.group};
    Argv del{"XDEL", keys.stream};
    for (std::string_view id : ids) {
      ack.add(id);
      del.add(id);
    }
    argvs.push_back(std::move(ack));
    argvs.push_back(std::move(del));
  }
  if (!orphans.records.empty()) {
    Argv del{"XDEL", keys.dlq};
    Argv unnote{"DEL"};
    for (std::string_view id : orphans.records) del.add(id);
    for (std::string_view id : orphans.entries) unnote.add_copy(orphan_key(keys.stream, id));
    argvs.push_back(std::move(del));
    argvs.push_back(std::move(unnote));
  }
  if (!locks.empty()) {
    Argv release{"EVAL", script_source(ScriptId::release)};
    release.add(static_cast<std::int64_t>(locks.size()));
    for (const UniqueLock* l : locks) release.add(l->key);
    for (const UniqueLock* l : locks) release.add(l->holder);
    argvs.push_back(std::move(release));
  }
  if (transaction) argvs.push_back(Argv{"EXEC"});
  return {first, argvs.size() - 1, transaction};
}

bool exec_refused(const std::vector<Reply>& replies, const AckSpan& block) {
  const ReplyView v = replies[block.last].view();
  return block.transaction && v.is_error() && !v.error().starts_with("EXECABORT");
}

void note_acks(Shared& s, const AckSpan& block, const std::string& error) {
  if (error_code(error) == "OOM") {
    // Plain acknowledgements for a second; then a MULTI tries again.
    s.acks_without_multi_until.store((Clock::now() + std::chrono::seconds(1)).time_since_epoch().count());
    if (!s.acks_oom_logged.exchange(true)) {
      log(LogLevel::warning, "the server is out of memory (" + error +
                                 "): acknowledging without MULTI, which it refuses, until it has room");
    }
  } else if (error.empty() && block.transaction && s.acks_oom_logged.exchange(false)) {
    log(LogLevel::info, "the server has room again: acknowledging in MULTI");
  }
}

std::string acks_error(const std::vector<Reply>& replies, const AckSpan& block) {
  const std::size_t multi = block.first, exec = block.last;
  for (std::size_t i = multi; i <= exec; ++i) {
    if (replies[i].view().is_error()) {
      const std::string_view e = replies[i].view().error();
      // EXECABORT only says that an earlier queued command was refused: report that one.
      if (!e.starts_with("EXECABORT")) return std::string(e);
    }
  }
  return replies[exec].view().is_error() ? std::string(replies[exec].view().error()) : std::string();
}

Completer::Completer(Shared& shared) : s_(shared), conn_(shared.connection), scripts_(conn_) {}

Completer::~Completer() { finish(Clock::now()); }

void Completer::start() {
  thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
}

void Completer::finish(Clock::time_point deadline) {
  request_finish(deadline);
  join();
}

void Completer::request_finish(Clock::time_point deadline) {
  if (!thread_.joinable()) return;
  deadline_.store(deadline.time_since_epoch().count());
  s_.inflight.stop_completer();
}

void Completer::join() {
  if (thread_.joinable()) thread_.join();
}

void Completer::main(const std::stop_token&) {
  block_sigpipe_for_this_thread();  // library code only runs on this thread
  std::vector<Completion> batch;
  InFlight::Writes more;  // start marks and reports
  Backoff retry_backoff(s_.connection.backoff_base, std::min(kRetryMax, s_.connection.backoff_max));
  Clock::time_point retry_at{};
  for (;;) {
    const Clock::time_point deadline{Clock::duration(deadline_.load())};
    const bool idle = batch.empty() && more.empty();
    const bool going =
        s_.inflight.wait_completions(batch, more, idle ? deadline : std::min(retry_at, deadline));
    const auto now = Clock::now();
    if (!going && batch.empty() && more.empty()) break;  // finish() was called and everything is written
    if (now >= deadline) {
      if (!batch.empty()) {
        log(LogLevel::warning, std::to_string(batch.size()) +
                                   " completions could not be written before the shutdown deadline; their "
                                   "entries stay pending and are reclaimed after claim_min_idle");
      }
      break;
    }
    if ((batch.empty() && more.empty()) || now < retry_at) continue;
    try {
      if (!conn_.connected()) {
        conn_.connect();
        count_reconnect(conn_, s_.metrics);
      }
      flush(batch, more);
    } catch (const ConnectionError& e) {
      // What was in flight may or may not have been written; every write is safe to repeat.
      const Millis delay = conn_.backoff_delay();
      log(LogLevel::warning,
          std::string("completer: ") + e.what() + "; retrying in " + std::to_string(delay.count()) + " ms");
      retry_at = now + delay;
      continue;
    } catch (const std::exception& e) {
      // The session set-up was refused (a busy or loading server, or an ACL problem).
      retry_backoff.fail();
      const Millis delay = retry_backoff.delay();
      log(LogLevel::warning,
          std::string("completer: ") + e.what() + "; retrying in " + std::to_string(delay.count()) + " ms");
      retry_at = now + delay;
      continue;
    }
    if (batch.empty() && more.empty()) {
      retry_backoff.reset();
    } else {
      retry_backoff.fail();
      retry_at = now + retry_backoff.delay();
    }
  }
}

namespace {

/// Whether the done script writes `c`: a tracked task's success, or a cancelled task's end.
bool by_done_script(const Completion& c) { return c.outcome == Outcome::ack && (c.tracked || c.cancelled); }

/// Gives each completion the done script writes its task's start mark, when that is among
/// `marks` and no report of the task is written first (reports need the record running): the
/// two are written together, the start first. The rest of `marks` is left there.
void pair_marks(std::vector<Completion>& batch, StartMarks& marks,
                const std::vector<std::shared_ptr<ReportBox>>& reports) {
  if (marks.empty()) return;
  std::unordered_map<EntryKey, std::size_t, EntryKeyHash> at;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (by_done_script(batch[i])) at.emplace(batch[i].key, i);
  }
  for (const auto& r : reports) at.erase(r->key);
  StartMarks alone;
  for (StartMark& m : marks) {
    const auto it = at.find(m.key);
    if (it != at.end() && !batch[it->second].start) {
      batch[it->second].start = true;
    } else {
      alone.push_back(std::move(m));
    }
  }
  marks = std::move(alone);
}

}  // namespace

void Completer::flush(std::vector<Completion>& batch, InFlight::Writes& more) {
  const std::vector<FateInfo> fate = s_.inflight.fates(batch);
  Plan plan;
  plan.write.assign(batch.size(), Write::none);
  plan.reply.assign(batch.size(), 0);
  const std::string& group = s_.opt.group;
  const std::string& me = s_.consumer_name;

  // Start marks first, so that nothing of a task is written before its start: those whose
  // completion is in this batch go with it (the done script), the rest many per running call.
  StartMarks& marks = more.marks;
  pair_marks(batch, marks, more.reports);
  for (std::uint16_t stream = 0; stream < s_.stream_count(); ++stream) {
    std::vector<std::size_t> of_stream;
    for (std::size_t k = 0; k < marks.size(); ++k) {
      if (marks[k].key.stream == stream) of_stream.push_back(k);
    }
    for (std::size_t from = 0; from < of_stream.size(); from += kPerScript) {
      const std::size_t to = std::min(of_stream.size(), from + kPerScript);
      Argv argv = scripts_.begin(ScriptId::running, 1);
      argv.add(s_.keys(stream).stream).add(group).add(me).add(s_.opt.stream);
      argv.add(static_cast<std::int64_t>(to - from));
      for (std::size_t k = from; k < to; ++k) {
        const StartMark& m = marks[of_stream[k]];
        argv.add(m.key.id).add(static_cast<std::int64_t>(2 * m.tracking.size()));
        for (const auto& [f, v] : m.tracking) argv.add(f).add(v);
      }
      plan.starts.emplace_back(plan.argvs.size(), to - from);
      plan.add(std::move(argv), ScriptId::running);
      for (std::size_t k = from; k < to; ++k) plan.marks.push_back(of_stream[k]);
    }
  }

  // Then the reports of running tasks (each task's held progress and partial result in one call).
  std::vector<ReportBox::Held> held(more.reports.size());
  for (std::size_t r = 0; r < more.reports.size(); ++r) {
    const ReportBox& box = *more.reports[r];
    held[r] = more.reports[r]->take(Clock::now());
    if (held[r].empty()) continue;
    Argv argv = scripts_.begin(ScriptId::report, 2);
    argv.add_copy(task_key(s_.opt.stream, box.task_id)).add(s_.keys(box.key.stream).stream);
    argv.add(s_.opt.stream).add(group).add(me).add(box.key.id).add(box.task_id);
    argv.add(held[r].progress ? "1" : "0").add(held[r].progress ? std::string_view(*held[r].progress) : "");
    argv.add(held[r].result ? "1" : "0").add(held[r].result ? std::string_view(*held[r].result) : "");
    plan.report_at.emplace_back(r, plan.argvs.size());
    plan.add(std::move(argv), ScriptId::report);
  }

  // Successes: one MULTI per stream. A success is final even if the lease was lost meanwhile:
  // the task is done, and the new owner's completion of it then finds nothing to do. An
  // orphaned entry's success deletes its provisional record instead.
  const bool transaction = acks_in_multi(s_);  // one mode for the whole pipeline
  for (std::uint16_t stream = 0; stream < s_.stream_count(); ++stream) {
    std::vector<std::string_view> ids;
    OrphanAcks orphans;
    std::vector<const UniqueLock*> locks;
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].outcome != Outcome::ack || batch[i].tracked || batch[i].cancelled ||
          batch[i].key.stream != stream) {
        continue;
      }
      if (fate[i].orphan_id.empty()) {
        ids.push_back(batch[i].key.id);
      } else {
        orphans.records.push_back(fate[i].orphan_id);
        orphans.entries.push_back(batch[i].key.id);
      }
      if (!batch[i].unique.key.empty()) locks.push_back(&batch[i].unique);
      members.push_back(i);
    }
    if (members.empty()) continue;
    const auto block = append_acks(plan.argvs, s_, stream, ids, orphans, locks, transaction);
    plan.ids.resize(plan.argvs.size(), not_a_script);
    plan.multis.push_back(block);
    for (std::size_t i : members) {
      plan.write[i] = Write::ack;
      plan.reply[i] = block.last;
    }
  }

  // Tracked tasks' successes and cancelled tasks' ends: each ack, its record and its events,
  // many per done script call.
  for (std::uint16_t stream = 0; stream < s_.stream_count(); ++stream) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (by_done_script(batch[i]) && batch[i].key.stream == stream) members.push_back(i);
    }
    for (std::size_t from = 0; from < members.size(); from += kPerScript) {
      const std::size_t to = std::min(members.size(), from + kPerScript);
      const QueueKeys& keys = s_.keys(stream);
      Argv argv = scripts_.begin(ScriptId::done, 2);
      argv.add(keys.stream).add(keys.dlq).add(group).add(s_.opt.stream).add(me);
      argv.add(static_cast<std::int64_t>(to - from));
      for (std::size_t k = from; k < to; ++k) {
        const std::size_t i = members[k];
        const Completion& c = batch[i];
        argv.add(c.key.id).add(c.cancelled ? "cancelled" : "done").add(c.start ? "1" : "0");
        argv.add(c.result ? "1" : "0").add(c.result ? std::string_view(*c.result) : std::string_view());
        argv.add(fate[i].orphan_id).add(c.unique.key).add(static_cast<std::int64_t>(2 * c.fields.size()));
        for (const auto& [f, v] : c.fields) argv.add(f).add(v);
        plan.write[i] = Write::done;
        plan.reply[i] = plan.argvs.size();
      }
      plan.add(std::move(argv), ScriptId::done);
    }
  }

  // Everything else: one script call each.
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Completion& c = batch[i];
    if (c.outcome == Outcome::ack) continue;
    const QueueKeys& keys = s_.keys(c.key.stream);
    if (c.outcome == Outcome::orphan) {
      // Moot once the entry is no longer held, or when its own completion is in this batch.
      const bool moot = !fate[i].held || std::any_of(batch.begin(), batch.end(), [&](const Completion& o) {
        return o.outcome != Outcome::orphan && o.key == c.key;
      });
      if (moot) continue;
    }
    const bool replace = !fate[i].orphan_id.empty() && c.outcome != Outcome::orphan;
    const std::string& dest = c.outcome != Outcome::retry ? keys.dlq
                              : c.delay.count() > 0       ? keys.delayed
                                                          : keys.stream;
    Argv argv;
    ScriptId id;
    if (c.outcome == Outcome::orphan) {
      id = ScriptId::orphan;
      argv = scripts_.begin(id, 3);
      argv.add(keys.stream).add(keys.dlq).add_copy(orphan_key(keys.stream, c.key.id));
      argv.add(group).add(me).add(c.key.id).add(static_cast<std::int64_t>(s_.opt.claim_min_idle.count()));
      plan.write[i] = Write::orphan;
    } else if (replace) {
      id = ScriptId::replace;
      argv = scripts_.begin(id, 3);
      argv.add(keys.dlq).add(dest).add_copy(orphan_key(keys.stream, c.key.id));
      argv.add(fate[i].orphan_id).add(c.key.id).add(me);
      plan.write[i] = Write::replace;
    } else {
      id = ScriptId::move;
      argv = scripts_.begin(id, 2);
      argv.add(keys.stream).add(dest).add(group).add(me).add(c.key.id);
      plan.write[i] = Write::move;
    }
    if (c.outcome == Outcome::retry && c.delay.count() > 0) {
      // Due by the server's clock; it goes back to the stream it came from (its priority).
      append_delayed_retry(argv, c.delay, new_uuid_v4(), keys.stream, s_.opt.stream, c.fields, c.attempted);
    } else if (c.outcome == Outcome::retry && c.handed_back) {
      append_hand_back(argv, s_.opt.stream, c.fields);
    } else if (c.outcome == Outcome::retry) {
      append_retry(argv, s_.opt.stream, c.fields);
    } else {
      // A dead letter releases the task's unique lock (lib/fate.lua), except a provisional
      // record of an entry whose handler runs: its own completion decides (a retry keeps the
      // lock). The record of one that never started is its fate.
      static const Fields none;
      const bool provisional = c.outcome == Outcome::orphan && fate[i].running;
      append_dead_letter(argv, c.reason, c.error, c.failed_at,
                         provisional ? std::string_view() : s_.opt.stream, c.read ? *c.read : none);
    }
    plan.reply[i] = plan.argvs.size();
    plan.add(std::move(argv), id);
  }

  std::vector<Reply> replies;
  try {
    replies = scripts_.call_pipelined(plan.ids, plan.argvs);
  } catch (...) {
    // Everything stays for the next try: the marks and completions in place, the reports held again.
    for (std::size_t r = 0; r < held.size(); ++r) more.reports[r]->put_back(std::move(held[r]));
    throw;
  }

  // The error of each MULTI block, at its EXEC reply's index.
  std::vector<std::string> block_error(replies.size());
  bool reconnect = false;
  for (const AckSpan& block : plan.multis) {
    block_error[block.last] = acks_error(replies, block);
    note_acks(s_, block, block_error[block.last]);
    reconnect = reconnect || exec_refused(replies, block);
  }
  if (reconnect) conn_.disconnect();  // not left inside a MULTI

  // The marks written alone and the reports (they precede every MULTI block). Refused for now:
  // kept for the next flush.
  StartMarks marks_later;
  std::size_t next_mark = 0;
  for (const auto& [at, count] : plan.starts) {
    const ReplyView v = replies[at].view();
    if (v.is_error()) {
      const bool again = is_transient_error(v.error());
      if (!again) {
        log(LogLevel::warning,
            std::to_string(count) + " tracked tasks could not be marked running: " + std::string(v.error()));
      }
      for (std::size_t k = 0; k < count; ++k) {
        if (again) marks_later.push_back(std::move(marks[plan.marks[next_mark + k]]));
      }
    }
    next_mark += count;
  }
  std::vector<std::shared_ptr<ReportBox>> reports_later;
  for (const auto& [r, at] : plan.report_at) {
    const ReplyView v = replies[at].view();
    if (v.is_error() && is_transient_error(v.error())) {
      if (more.reports[r]->put_back(std::move(held[r]))) reports_later.push_back(more.reports[r]);
    } else if (v.is_error()) {
      log(LogLevel::warning, "task " + more.reports[r]->task_id +
                                 ": its reports could not be written: " + std::string(v.error()));
    } else if (v.is_integer() && v.integer() == 0) {
      more.reports[r]->refuse();  // not this consumer's running task any more
    }
  }
  more.marks = std::move(marks_later);
  more.reports = std::move(reports_later);

  std::vector<Completion> retry_later;
  std::vector<EntryKey> finished;
  std::uint64_t done = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Completion& c = batch[i];
    if (plan.write[i] == Write::none) {
      // A moot orphan: an entry no longer held is forgotten (a lost entry still held, which
      // nobody runs, must not keep its slot); one whose completion is in this batch is
      // forgotten with it.
      if (!fate[i].held) finished.push_back(c.key);
      continue;
    }
    std::string error;
    if (plan.write[i] == Write::ack) {
      error = block_error[plan.reply[i]];
    } else if (reconnect) {
      // After a refused EXEC the connection was still inside the MULTI: the scripts behind it
      // were queued, not run (and discarded with the connection). Run them again.
      retry_later.push_back(std::move(c));
      continue;
    } else if (replies[plan.reply[i]].view().is_error()) {
      error = std::string(replies[plan.reply[i]].view().error());
    }
    if (!error.empty()) {
      if (is_transient_error(error)) {
        retry_later.push_back(std::move(c));
        continue;
      }
      log(LogLevel::error, "completing entry " + c.key.id + ": " + error +
                               "; it stays pending and will be reclaimed after claim_min_idle");
      finished.push_back(c.key);
      continue;
    }
    const ReplyView v = replies[plan.reply[i]].view();
    if (plan.write[i] == Write::ack || plan.write[i] == Write::done) {
      if (c.cancelled) {
        Metrics::add(s_.metrics.cancelled, 1);
      } else {
        ++done;
      }
      if (c.given_up) Metrics::add(s_.metrics.given_up, 1);
      finished.push_back(c.key);
    } else if (v.is_integer()) {
      // Not pending any more, another consumer owns it, or its provisional record was acted
      // on: its fate is not ours to decide.
      Metrics::add(s_.metrics.stale, 1);
      log(LogLevel::warning, "entry " + c.key.id +
                                 (plan.write[i] == Write::replace ? "'s dead-letter record was replayed"
                                  : v.integer() == move_not_owner ? " was reclaimed by another consumer"
                                                                  : " is no longer pending") +
                                 "; its " + (c.outcome == Outcome::retry ? "retry" : "dead letter") +
                                 " was not written");
      finished.push_back(c.key);
    } else if (plan.write[i] == Write::orphan) {
      // The record is the task's fate unless its handler runs: then its completion decides
      // (and is counted).
      if (s_.inflight.orphaned(c.key, std::string(v.str()))) Metrics::add(s_.metrics.dead_lettered, 1);
    } else if (plan.write[i] == Write::move && v.is_string() && v.str() == "cancelled") {
      // A retry or put-back of an entry an operator cancelled meanwhile: it ended cancelled.
      Metrics::add(s_.metrics.cancelled, 1);
      finished.push_back(c.key);
    } else {
      Metrics::add(c.outcome != Outcome::retry ? s_.metrics.dead_lettered
                   : c.handed_back             ? s_.metrics.handed_back
                   : c.attempted               ? s_.metrics.retried
                                               : s_.metrics.rate_limited,
                   1);
      if (c.timed_out) Metrics::add(s_.metrics.timed_out, 1);
      if (c.given_up) Metrics::add(s_.metrics.given_up, 1);
      finished.push_back(c.key);
    }
  }
  Metrics::add(s_.metrics.done, done);
  s_.inflight.completed(finished);
  if (!retry_later.empty()) {
    log(LogLevel::warning, std::to_string(retry_later.size()) + " completions refused for now (" +
                               "the server is loading, full or failing over); retrying");
  }
  batch = std::move(retry_later);
}

}  // namespace streamq::detail
