// SPDX-License-Identifier: MIT
#include "completer.hpp"

#include <algorithm>

#include "log.hpp"
#include "redis/error_code.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/fate_args.hpp"

namespace streamq::detail {
namespace {

constexpr Millis kRetryMax{2000};  // longest wait before a refused write is tried again

/// How one completion is written.
enum class Write { ack, done, move, replace, orphan, none };

/// The pipeline of one flush and where each completion's reply is.
struct Plan {
  std::vector<Argv> argvs;
  std::vector<ScriptId> ids;
  std::vector<Write> write;        // per completion
  std::vector<std::size_t> reply;  // per completion: index of its reply (ack: of EXEC)
  std::vector<AckSpan> multis;     // where each acknowledgement block is

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
  Backoff retry_backoff(s_.connection.backoff_base, std::min(kRetryMax, s_.connection.backoff_max));
  Clock::time_point retry_at{};
  for (;;) {
    const Clock::time_point deadline{Clock::duration(deadline_.load())};
    const bool more =
        s_.inflight.wait_completions(batch, batch.empty() ? deadline : std::min(retry_at, deadline));
    const auto now = Clock::now();
    if (!more && batch.empty()) break;  // finish() was called and everything is written
    if (now >= deadline) {
      if (!batch.empty()) {
        log(LogLevel::warning, std::to_string(batch.size()) +
                                   " completions could not be written before the shutdown deadline; their "
                                   "entries stay pending and are reclaimed after claim_min_idle");
      }
      break;
    }
    if (batch.empty() || now < retry_at) continue;
    try {
      if (!conn_.connected()) {
        conn_.connect();
        count_reconnect(conn_, s_.metrics);
      }
      flush(batch);
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
    if (batch.empty()) {
      retry_backoff.reset();
    } else {
      retry_backoff.fail();
      retry_at = now + retry_backoff.delay();
    }
  }
}

void Completer::flush(std::vector<Completion>& batch) {
  const std::vector<FateInfo> fate = s_.inflight.fates(batch);
  Plan plan;
  plan.write.assign(batch.size(), Write::none);
  plan.reply.assign(batch.size(), 0);
  const std::string& group = s_.opt.group;
  const std::string& me = s_.consumer_name;

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

  // Everything else: one script call each.
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Completion& c = batch[i];
    if (c.outcome == Outcome::ack && !c.tracked && !c.cancelled) continue;
    const QueueKeys& keys = s_.keys(c.key.stream);
    if (c.outcome == Outcome::ack) {
      // A tracked task's success, or a cancelled task's end: the ack, its record and its event
      // in one script.
      Argv argv = scripts_.begin(ScriptId::done, 2);
      argv.add(keys.stream).add(keys.dlq).add(group).add(c.key.id).add(s_.opt.stream);
      argv.add(c.result ? "1" : "0").add(c.result ? std::string_view(*c.result) : std::string_view());
      argv.add(fate[i].orphan_id).add(c.unique.key).add(c.cancelled ? "cancelled" : "done");
      for (const auto& [k, v] : c.fields) argv.add(k).add(v);
      plan.write[i] = Write::done;
      plan.reply[i] = plan.argvs.size();
      plan.add(std::move(argv), ScriptId::done);
      continue;
    }
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

  const std::vector<Reply> replies = scripts_.call_pipelined(plan.ids, plan.argvs);

  // The error of each MULTI block, at its EXEC reply's index.
  std::vector<std::string> block_error(replies.size());
  bool reconnect = false;
  for (const AckSpan& block : plan.multis) {
    block_error[block.last] = acks_error(replies, block);
    note_acks(s_, block, block_error[block.last]);
    reconnect = reconnect || exec_refused(replies, block);
  }
  if (reconnect) conn_.disconnect();  // not left inside a MULTI

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
