// SPDX-License-Identifier: MIT
#include "lease_keeper.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include "log.hpp"
#include "retry_policy.hpp"
#include "task_control.hpp"
#include "watchdog.hpp"
#include "wire/codec.hpp"

namespace streamq::detail {
namespace {

// XCLAIM ... IDLE value that makes a released entry claimable by any reclaimer at once. It
// must stay below the server's epoch milliseconds (Redis clamps larger values to 0).
constexpr const char* kReleaseIdle = "100000000000";
constexpr std::size_t kLeaseChunk = 500;  // ids per lease script call

/// The running handlers of entries whose lease another consumer took (it reclaimed them while
/// this worker was frozen or cut off for claim_min_idle, or an operator moved them) or that are
/// no longer pending: they are stopped (lease_lost) and their attempts put back, which the
/// owner check of the put-back then refuses: the entry's fate is its new owner's (a handler
/// that still returns successfully completes the task, as a success is final).
void fence_lost(Shared& s, std::uint16_t stream, const std::vector<std::string>& lost) {
  for (const auto& c : s.inflight.running_controls(stream, lost)) {
    log(LogLevel::warning, "the entry of task " + c->task_id + " of " + s.keys(stream).stream +
                               " was taken by another consumer while its handler ran (this worker could "
                               "not renew its lease for claim_min_idle): the handler is stopped");
    c->request(StopWhy::lease_lost);
    s.watchdog->asked(c);
  }
  if (const std::size_t n = s.inflight.lost(stream, lost); n > 0) {
    log(LogLevel::warning, std::to_string(n) + " held entries of " + s.keys(stream).stream +
                               " were taken by another consumer or are no longer pending; not running them");
  }
}

/// Runs the lease script over `ids` in chunks: idle "0" renews, kReleaseIdle releases;
/// `count` "-1" keeps the delivery counter. Reports lost and gone entries.
void lease(Shared& s, ScriptRunner& scripts, std::uint16_t stream, const std::vector<std::string>& ids,
           const char* idle, const char* count) {
  for (std::size_t first = 0; first < ids.size(); first += kLeaseChunk) {
    const std::size_t last = std::min(ids.size(), first + kLeaseChunk);
    Argv argv = scripts.begin(ScriptId::lease, 1);
    argv.add(s.keys(stream).stream).add(s.opt.group).add(s.consumer_name).add(idle).add(count);
    for (std::size_t i = first; i < last; ++i) argv.add(ids[i]);
    const Clock::time_point sent = Clock::now();  // each lease ends no earlier than a lease from now
    const Reply reply = scripts.call(ScriptId::lease, argv);
    const ReplyView r = reply.view().check();
    std::vector<std::string> lost, gone, cancel;
    for (std::size_t i = 0; i < r[0].size(); ++i) lost.emplace_back(r[0][i].str());
    for (std::size_t i = 0; i < r[1].size(); ++i) gone.emplace_back(r[1][i].str());
    for (std::size_t i = 0; i < r[2].size(); ++i) cancel.emplace_back(r[2][i].str());
    // What the watchdog's fences count from (lost and gone entries, marked below, are no longer
    // fenced by their lease).
    const std::vector<std::string> chunk(ids.begin() + static_cast<std::ptrdiff_t>(first),
                                         ids.begin() + static_cast<std::ptrdiff_t>(last));
    s.inflight.renewed(stream, chunk, sent);
    ask_cancelled(s, stream, cancel);
    fence_lost(s, stream, lost);
    report_gone(s, stream, gone);
  }
}

/// The running handlers of entries whose provisional record's note expired (this worker could
/// not renew it for claim_min_idle): the record counted as final meanwhile (a reclaimer may have
/// ended the task from it, an operator replayed it), so they are stopped as a lost lease stops
/// a handler. Their completions then write nothing that end did not (done.lua, replace.lua).
void fence_unnoted(Shared& s, std::uint16_t stream, const std::vector<std::string>& unnoted) {
  for (const auto& c : s.inflight.running_controls(stream, unnoted)) {
    log(LogLevel::warning, "the provisional dead-letter record of task " + c->task_id + " of " +
                               s.keys(stream).stream +
                               " counted as its fate while this worker could not renew its note for "
                               "claim_min_idle: the handler is stopped");
    c->request(StopWhy::lease_lost);
    s.watchdog->asked(c);
  }
}

/// Renews the notes of this consumer's provisional dead-letter records of `stream` (see
/// orphan.lua): while the handler runs, its completion must still find the note. A note that
/// expired meanwhile (the server was out of reach for claim_min_idle) is not written again: the
/// record counted as final in that time, and its handler is stopped (fence_unnoted).
void renew_notes(Shared& s, Connection& conn, std::uint16_t stream) {
  const std::vector<std::string> ids = s.inflight.noted(stream);
  if (ids.empty()) return;
  const std::string ttl = std::to_string(s.opt.claim_min_idle.count());
  std::vector<Argv> argvs;
  argvs.reserve(ids.size());
  for (const std::string& id : ids) {
    Argv a{"PEXPIRE"};
    a.add_copy(orphan_key(s.keys(stream).stream, id)).add(ttl);
    argvs.push_back(std::move(a));
  }
  const std::vector<Reply> replies = conn.pipeline(argvs);
  std::vector<std::string> unnoted;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (replies[i].view().check().integer() == 0) unnoted.push_back(ids[i]);
  }
  if (!unnoted.empty()) fence_unnoted(s, stream, unnoted);
}

/// Renews the concurrency slots (ConcurrencyLimit) of the running tasks, one pipelined script
/// call per slot. A task whose slots were all renewed has its fence moved on (see
/// Watchdog::fence); one whose slot is gone (another worker's acquire dropped it as expired, or
/// the key was lost) fences itself now: asked to stop (lease_lost), given up timeout_grace later.
/// A slot is never taken again: the limit may be full by now.
void renew_slots(Shared& s, ScriptRunner& scripts) {
  std::vector<ScriptId> ids;
  std::vector<Argv> argvs;
  std::vector<std::shared_ptr<TaskControl>> running = s.inflight.running_controls();
  std::erase_if(running, [](const auto& c) { return c->slot_keys.empty(); });
  const Clock::time_point sent = Clock::now();  // each lease ends no earlier than a lease from now
  for (const auto& c : running) {
    for (const std::string& key : c->slot_keys) {
      Argv argv = scripts.begin(ScriptId::slot, 1);
      argv.add(key)
          .add("renew")
          .add(c->slot_holder)
          .add(static_cast<std::int64_t>(s.opt.claim_min_idle.count()));
      argvs.push_back(std::move(argv));
      ids.push_back(ScriptId::slot);
    }
  }
  if (argvs.empty()) return;
  const std::vector<Reply> replies = scripts.call_pipelined(ids, argvs);
  std::size_t next = 0;
  for (const auto& c : running) {
    bool held = true;
    for (std::size_t i = 0; i < c->slot_keys.size(); ++i)
      held = replies[next++].view().check().integer() == 1 && held;
    if (held) {
      s.watchdog->fence(c, sent + fence_after(s.opt.claim_min_idle));
      continue;
    }
    log(LogLevel::warning, "the concurrency slot of task " + c->task_id +
                               " is gone (its lease ended while this worker was frozen or cut off, or "
                               "the key was lost): the task is stopped and put back");
    c->request(StopWhy::lease_lost);
    s.watchdog->asked(c);
  }
}

}  // namespace

void ask_cancelled(Shared& s, std::uint16_t stream, const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  const InFlight::Cancelled noticed = s.inflight.cancel(stream, ids);
  for (const auto& c : noticed.running) {
    log(LogLevel::info, "task " + c->task_id + " was cancelled by an operator; its handler is asked to stop");
    s.watchdog->asked(c);
  }
  for (const auto& w : noticed.waiting) {
    log(LogLevel::info, "task " + w.task_id + " (entry " + w.entry_id + " of " + s.keys(stream).stream +
                            ") was cancelled by an operator before its handler started; it will not run");
  }
}

void report_gone(Shared& s, std::uint16_t stream, const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  const std::vector<std::shared_ptr<const Fields>> fields = s.inflight.gone(stream, ids);
  const std::string now = format_timestamp(std::chrono::system_clock::now());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!fields[i]) continue;  // no longer held, or already reported
    log(LogLevel::warning, "entry " + ids[i] + " of " + s.keys(stream).stream +
                               " was deleted from the stream while held; dead-lettering the copy read");
    s.inflight.push(Completion{EntryKey{stream, ids[i]},
                               Outcome::orphan,
                               {},
                               fields[i],
                               reason::body_lost,
                               "body lost: the entry was trimmed or deleted from the stream while a consumer "
                               "held it; these are the fields it had read",
                               now});
  }
}

LeaseKeeper::LeaseKeeper(Shared& shared) : s_(shared), next_(Clock::now() + shared.opt.heartbeat_interval) {}

void LeaseKeeper::tick(ScriptRunner& scripts, Clock::time_point now) {
  // Leases older than half an interval are renewed, so with one tick per interval none is
  // ever older than about one interval plus the time a tick takes.
  for (std::uint16_t stream = 0; stream < s_.stream_count(); ++stream) {
    lease(s_, scripts, stream, s_.inflight.due_for_lease(stream, now - s_.opt.heartbeat_interval / 2), "0",
          "-1");
    renew_notes(s_, scripts.connection(), stream);
  }
  renew_slots(s_, scripts);
  next_ = now + s_.opt.heartbeat_interval;
}

void LeaseKeeper::release(Shared& s, ScriptRunner& scripts) {
  std::vector<Unstarted> entries = s.inflight.unstarted();
  for (std::uint16_t stream = 0; stream < s.stream_count(); ++stream) {
    std::map<std::int64_t, std::vector<std::string>> by_count;  // one lease call per count to set
    for (const Unstarted& u : entries) {
      if (u.key.stream == stream) by_count[u.count].push_back(u.key.id);
    }
    for (const auto& [count, ids] : by_count) {
      lease(s, scripts, stream, ids, kReleaseIdle, std::to_string(count).c_str());
    }
  }
  if (!entries.empty()) {
    log(LogLevel::info,
        "released " + std::to_string(entries.size()) + " unstarted entries for other consumers");
  }
}

}  // namespace streamq::detail
