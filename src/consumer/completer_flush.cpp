// SPDX-License-Identifier: MIT
// The completer's flush (see completer.hpp): one pipeline per batch, written step by step in the
// order Redis runs it, then what came of each write.
#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <unordered_set>

#include "completer.hpp"
#include "log.hpp"
#include "redis/error_code.hpp"
#include "report_box.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/fate_args.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {
namespace {

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

/// Whether the done script writes `c`: a tracked task's or a tenant's task's success, or a
/// cancelled task's end.
bool by_done_script(const Completion& c) {
  return c.outcome == Outcome::ack && (c.tracked || c.cancelled || c.tenant);
}

/// One flush: what it writes, step by step in the order Redis runs it (a task's start before
/// its reports, both before its completion), then what came of each write.
class Flush {
 public:
  Flush(Shared& s, ScriptRunner& scripts, std::vector<Completion>& batch, InFlight::Writes& more)
      : s_(s), scripts_(scripts), batch_(batch), more_(more), fate_(s.inflight.fates(batch)) {
    plan_.write.assign(batch.size(), Write::none);
    plan_.reply.assign(batch.size(), 0);
  }

  /// Step 1: start marks. Those whose completion is in this batch go with it (step 4), the
  /// rest many per running call.
  void marks();
  /// Step 2: the reports of running tasks, each task's held progress and partial result in
  /// one call.
  void reports();
  /// Step 3: untracked successes, one MULTI of XACK + XDEL per stream. A success is final even
  /// if the lease was lost meanwhile: the task is done, and the new owner's completion of it
  /// then finds nothing to do. An orphaned entry's success deletes its provisional record.
  void acks();
  /// Step 4: tracked successes and cancelled tasks' ends: each ack, its record and its events,
  /// many per done call.
  void done_calls();
  /// Step 5: retries, dead letters and orphan records: one script call each.
  void fates();
  /// Sends the pipeline. On a connection error, everything stays for the next try (the
  /// marks and completions in place, the reports held again) and the error is rethrown.
  void send(ScriptRunner& scripts, Connection& conn);
  /// What came of steps 1 and 2: marks and reports refused for now stay in `more` for the
  /// next flush; a report refused as stale closes its box.
  void settle_marks_and_reports();
  /// What came of steps 3 to 5: metrics, the entries forgotten, and the completions to try
  /// again, which are left in the batch.
  void conclude();

 private:
  Argv fate_call(std::size_t i, ScriptId& id);

  Shared& s_;
  ScriptRunner& scripts_;
  std::vector<Completion>& batch_;
  InFlight::Writes& more_;
  const std::vector<FateInfo> fate_;
  Plan plan_;
  std::vector<ReportBox::Held> held_;  // per report box: what step 2 writes
  std::vector<Reply> replies_;
  std::vector<std::string> block_error_;  // per reply: the error of the MULTI block it ends
  bool reconnect_ = false;                // an EXEC was refused: the scripts behind it did not run
};

void Flush::marks() {
  // A mark goes with its task's success unless a report of the task is written first
  // (reports need the record running).
  StartMarks& marks = more_.marks;
  if (!marks.empty()) {
    std::unordered_map<EntryKey, std::size_t, EntryKeyHash> at;
    for (std::size_t i = 0; i < batch_.size(); ++i) {
      if (by_done_script(batch_[i])) at.emplace(batch_[i].key, i);
    }
    for (const auto& r : more_.reports) at.erase(r->key);
    StartMarks alone;
    for (StartMark& m : marks) {
      const auto it = at.find(m.key);
      if (it != at.end() && !batch_[it->second].start) {
        batch_[it->second].start = true;
      } else {
        alone.push_back(std::move(m));
      }
    }
    marks = std::move(alone);
  }
  for (std::uint16_t stream = 0; stream < s_.stream_count(); ++stream) {
    std::vector<std::size_t> of_stream;
    for (std::size_t k = 0; k < marks.size(); ++k) {
      if (marks[k].key.stream == stream) of_stream.push_back(k);
    }
    for (std::size_t from = 0; from < of_stream.size(); from += kPerScript) {
      const std::size_t to = std::min(of_stream.size(), from + kPerScript);
      Argv argv = scripts_.begin(ScriptId::running, 1);
      argv.add(s_.keys(stream).stream).add(s_.opt.group).add(s_.consumer_name).add(s_.opt.stream);
      argv.add(static_cast<std::int64_t>(to - from));
      for (std::size_t k = from; k < to; ++k) {
        const StartMark& m = marks[of_stream[k]];
        argv.add(m.key.id).add(m.deliveries).add(static_cast<std::int64_t>(2 * m.tracking.size()));
        for (const auto& [f, v] : m.tracking) argv.add(f).add(v);
        plan_.marks.push_back(of_stream[k]);
      }
      plan_.starts.emplace_back(plan_.argvs.size(), to - from);
      plan_.add(std::move(argv), ScriptId::running);
    }
  }
}

void Flush::reports() {
  held_.resize(more_.reports.size());
  for (std::size_t r = 0; r < more_.reports.size(); ++r) {
    const ReportBox& box = *more_.reports[r];
    held_[r] = more_.reports[r]->take(Clock::now());
    if (held_[r].empty()) continue;
    const ReportBox::Held& h = held_[r];
    const std::string& stream = s_.keys(box.key.stream).stream;
    Argv argv = scripts_.begin(ScriptId::report, 3);
    argv.add_copy(task_key(s_.opt.stream, box.task_id)).add(stream).add_copy(orphan_key(stream, box.key.id));
    argv.add(s_.opt.stream).add(s_.opt.group).add(s_.consumer_name).add(box.key.id).add(box.task_id);
    argv.add(h.progress ? "1" : "0").add(h.progress ? std::string_view(*h.progress) : "");
    argv.add(h.result ? "1" : "0").add(h.result ? std::string_view(*h.result) : "");
    plan_.report_at.emplace_back(r, plan_.argvs.size());
    plan_.add(std::move(argv), ScriptId::report);
  }
}

void Flush::acks() {
  const bool transaction = acks_in_multi(s_);  // one mode for the whole pipeline
  for (std::uint16_t stream = 0; stream < s_.stream_count(); ++stream) {
    std::vector<std::string_view> ids;
    OrphanAcks orphans;
    std::vector<const UniqueLock*> locks;
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < batch_.size(); ++i) {
      const Completion& c = batch_[i];
      if (c.outcome != Outcome::ack || by_done_script(c) || c.key.stream != stream) continue;
      if (fate_[i].orphan_id.empty()) {
        ids.push_back(c.key.id);
      } else {
        orphans.records.push_back(fate_[i].orphan_id);
        orphans.entries.push_back(c.key.id);
      }
      if (!c.unique.key.empty()) locks.push_back(&c.unique);
      members.push_back(i);
    }
    if (members.empty()) continue;
    const auto block = append_acks(plan_.argvs, s_, stream, ids, orphans, locks, transaction);
    plan_.ids.resize(plan_.argvs.size(), not_a_script);
    plan_.multis.push_back(block);
    for (std::size_t i : members) {
      plan_.write[i] = Write::ack;
      plan_.reply[i] = block.last;
    }
  }
}

void Flush::done_calls() {
  for (std::uint16_t stream = 0; stream < s_.stream_count(); ++stream) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < batch_.size(); ++i) {
      if (by_done_script(batch_[i]) && batch_[i].key.stream == stream) members.push_back(i);
    }
    for (std::size_t from = 0; from < members.size(); from += kPerScript) {
      const std::size_t to = std::min(members.size(), from + kPerScript);
      const QueueKeys& keys = s_.keys(stream);
      Argv argv = scripts_.begin(ScriptId::done, 2);
      argv.add(keys.stream).add(keys.dlq).add(s_.opt.group).add(s_.opt.stream).add(s_.consumer_name);
      argv.add(static_cast<std::int64_t>(to - from));
      for (std::size_t k = from; k < to; ++k) {
        const std::size_t i = members[k];
        const Completion& c = batch_[i];
        argv.add(c.key.id).add(c.cancelled ? "cancelled" : "done").add(c.start ? "1" : "0");
        argv.add(c.result ? "1" : "0").add(c.result ? std::string_view(*c.result) : std::string_view());
        argv.add(fate_[i].orphan_id).add(c.unique.key).add(static_cast<std::int64_t>(2 * c.fields.size()));
        for (const auto& [f, v] : c.fields) argv.add(f).add(v);
        plan_.write[i] = Write::done;
        plan_.reply[i] = plan_.argvs.size();
      }
      plan_.add(std::move(argv), ScriptId::done);
    }
  }
}

void Flush::fates() {
  for (std::size_t i = 0; i < batch_.size(); ++i) {
    const Completion& c = batch_[i];
    if (c.outcome == Outcome::ack) continue;
    if (c.outcome == Outcome::orphan) {
      // Moot once the entry is no longer held, or when its own completion is in this batch.
      const bool moot = !fate_[i].held || std::any_of(batch_.begin(), batch_.end(), [&](const Completion& o) {
        return o.outcome != Outcome::orphan && o.key == c.key;
      });
      if (moot) continue;
    }
    ScriptId id{};
    Argv argv = fate_call(i, id);
    plan_.reply[i] = plan_.argvs.size();
    plan_.add(std::move(argv), id);
  }
}

Argv Flush::fate_call(std::size_t i, ScriptId& id) {
  const Completion& c = batch_[i];
  const QueueKeys& keys = s_.keys(c.key.stream);
  const std::string& me = s_.consumer_name;
  const bool replace = !fate_[i].orphan_id.empty() && c.outcome != Outcome::orphan;
  const std::string& dest = c.outcome != Outcome::retry ? keys.dlq
                            : c.delay.count() > 0       ? keys.delayed
                                                        : keys.stream;
  Argv argv;
  if (c.outcome == Outcome::orphan) {
    id = ScriptId::orphan;
    argv = scripts_.begin(id, 4);
    argv.add(keys.stream)
        .add(keys.dlq)
        .add_copy(orphan_key(keys.stream, c.key.id))
        .add_copy(orphans_key(keys.stream));
    argv.add(s_.opt.group)
        .add(me)
        .add(c.key.id)
        .add(static_cast<std::int64_t>(s_.opt.claim_min_idle.count()));
    plan_.write[i] = Write::orphan;
  } else if (replace) {
    id = ScriptId::replace;
    argv = scripts_.begin(id, 3);
    argv.add(keys.dlq).add(dest).add_copy(orphan_key(keys.stream, c.key.id));
    argv.add(fate_[i].orphan_id).add(c.key.id).add(me);
    plan_.write[i] = Write::replace;
  } else {
    id = ScriptId::move;
    argv = scripts_.begin(id, 2);
    argv.add(keys.stream).add(dest).add(s_.opt.group).add(me).add(c.key.id);
    plan_.write[i] = Write::move;
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
    const bool provisional = c.outcome == Outcome::orphan && fate_[i].running;
    append_dead_letter(argv, c.reason, c.error, c.failed_at, provisional ? std::string_view() : s_.opt.stream,
                       c.read ? *c.read : none);
  }
  return argv;
}

void Flush::send(ScriptRunner& scripts, Connection& conn) {
  try {
    replies_ = scripts.call_pipelined(plan_.ids, plan_.argvs);
  } catch (...) {
    for (std::size_t r = 0; r < held_.size(); ++r) more_.reports[r]->put_back(std::move(held_[r]));
    throw;
  }
  // The error of each MULTI block, at its EXEC reply's index.
  block_error_.resize(replies_.size());
  for (const AckSpan& block : plan_.multis) {
    block_error_[block.last] = acks_error(replies_, block);
    note_acks(s_, block, block_error_[block.last]);
    reconnect_ = reconnect_ || exec_refused(replies_, block);
  }
  if (reconnect_) conn.disconnect();  // not left inside a MULTI
}

void Flush::settle_marks_and_reports() {
  // (Both precede every MULTI block: a refused EXEC does not concern them.)
  StartMarks& marks = more_.marks;
  StartMarks marks_later;
  std::size_t next_mark = 0;
  for (const auto& [at, count] : plan_.starts) {
    const ReplyView v = replies_[at].view();
    if (v.is_error()) {
      const bool again = is_transient_error(v.error());
      if (!again) {
        log(LogLevel::warning,
            std::to_string(count) + " tracked tasks could not be marked running: " + std::string(v.error()));
      }
      for (std::size_t k = 0; k < count; ++k) {
        if (again) marks_later.push_back(std::move(marks[plan_.marks[next_mark + k]]));
      }
    }
    next_mark += count;
  }
  // A report whose mark is kept for the next flush found no running record: it goes again after it.
  std::unordered_set<EntryKey, EntryKeyHash> unmarked;
  for (const StartMark& m : marks_later) unmarked.insert(m.key);
  std::vector<std::shared_ptr<ReportBox>> reports_later;
  for (const auto& [r, at] : plan_.report_at) {
    const ReplyView v = replies_[at].view();
    const bool again = v.is_error()
                           ? is_transient_error(v.error())
                           : v.is_integer() && v.integer() == 0 && unmarked.contains(more_.reports[r]->key);
    if (again) {
      if (more_.reports[r]->put_back(std::move(held_[r]))) reports_later.push_back(more_.reports[r]);
    } else if (v.is_error()) {
      log(LogLevel::warning, "task " + more_.reports[r]->task_id +
                                 ": its reports could not be written: " + std::string(v.error()));
    } else if (v.is_integer() && v.integer() == 0) {
      more_.reports[r]->refuse();  // not this consumer's running task any more
    }
  }
  marks = std::move(marks_later);
  more_.reports = std::move(reports_later);
}

void Flush::conclude() {
  std::vector<Completion> retry_later;
  std::vector<EntryKey> finished;
  std::uint64_t done = 0;
  for (std::size_t i = 0; i < batch_.size(); ++i) {
    Completion& c = batch_[i];
    if (plan_.write[i] == Write::none) {
      // A moot orphan: an entry no longer held is forgotten (a lost entry still held, which
      // nobody runs, must not keep its slot); one whose completion is in this batch is
      // forgotten with it.
      if (!fate_[i].held) finished.push_back(c.key);
      continue;
    }
    std::string error;
    if (plan_.write[i] == Write::ack) {
      error = block_error_[plan_.reply[i]];
    } else if (reconnect_) {
      // After a refused EXEC the connection was still inside the MULTI: the scripts behind it
      // were queued, not run (and discarded with the connection). Run them again.
      retry_later.push_back(std::move(c));
      continue;
    } else if (replies_[plan_.reply[i]].view().is_error()) {
      error = std::string(replies_[plan_.reply[i]].view().error());
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
    const ReplyView v = replies_[plan_.reply[i]].view();
    if (plan_.write[i] == Write::ack || plan_.write[i] == Write::done) {
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
                                 (plan_.write[i] == Write::replace
                                      ? "'s dead-letter record became its fate (replayed, or its task "
                                        "ended from it while this worker was cut off)"
                                  : v.integer() == move_not_owner ? " was reclaimed by another consumer"
                                                                  : " is no longer pending") +
                                 "; its " + (c.outcome == Outcome::retry ? "retry" : "dead letter") +
                                 " was not written");
      finished.push_back(c.key);
    } else if (plan_.write[i] == Write::orphan) {
      // The record is the task's fate unless its handler runs: then its completion decides
      // (and is counted).
      if (s_.inflight.orphaned(c.key, std::string(v.str()))) Metrics::add(s_.metrics.dead_lettered, 1);
    } else if (plan_.write[i] == Write::move && v.is_string() && v.str() == "cancelled") {
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
  batch_ = std::move(retry_later);
}

}  // namespace

void Completer::flush(std::vector<Completion>& batch, InFlight::Writes& more) {
  // The end of a flow's child in another partition or queue than its parent goes to this partition's
  // outbox: its courier carries it at once rather than at its next pass.
  const bool to_carry = s_.wake_courier && std::any_of(batch.begin(), batch.end(), [](const Completion& c) {
                          return std::any_of(c.fields.begin(), c.fields.end(),
                                             [](const auto& f) { return f.first == field::flow_home; });
                        });
  Flush f(s_, scripts_, batch, more);
  f.marks();
  f.reports();
  f.acks();
  f.done_calls();
  f.fates();
  f.send(scripts_, conn_);
  f.settle_marks_and_reports();
  f.conclude();
  if (to_carry) s_.wake_courier();
}

}  // namespace streamq::detail
