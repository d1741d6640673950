// SPDX-License-Identifier: MIT
#include "waiter.hpp"

#include <algorithm>
#include <utility>

#include "log.hpp"
#include "streamq/errors.hpp"
#include "wire/keys.hpp"
#include "wire/record.hpp"

namespace streamq::detail {
namespace {

// The longest one XREAD blocks: how late a wait registered meanwhile on a queue without events
// is first read by the thread, and how often waits without a record are looked at again.
constexpr Millis kBlock{100};
constexpr std::int64_t kPage = 1000;        // events per stream per read
constexpr std::size_t kRemembered = 10000;  // final events remembered
constexpr std::string_view kNoRecord =
    " was found: it was not enqueued with a Retention (EnqueueOptions::retention), its record expired, or "
    "it is another queue's (WaitOptions::wait_for_enqueue waits for a task enqueued later)";

std::string describe_failure(const TaskRecord& r) {
  // A cancelled task's error field is its last failed attempt's, not why it ended.
  if (r.state == TaskRecord::State::cancelled)
    return "task " + r.task_id + " ended cancelled: an operator cancelled it";
  std::string m = "task " + r.task_id + " ended " + std::string(to_string(r.state));
  if (!r.reason.empty()) m += " (" + r.reason + ")";
  if (!r.error.empty()) m += ": " + r.error;
  return m;
}

/// What a final event says of its task, for a record that went with its end (retention 0).
TaskRecord ended_by(const QueueEvent& e) {
  TaskRecord r;
  r.task_id = e.task_id;
  r.queue = e.queue;
  r.state = parse_record_state(e.event).value_or(TaskRecord::State::done);
  r.finished_at = e.at;
  for (const auto& [k, v] : e.fields) {
    if (k == "error") r.error = v;
    if (k == "reason") r.reason = v;
  }
  return r;
}

}  // namespace

bool Waiter::Pending::answer(WaitOutcome o) {
  {
    std::lock_guard lock(mutex);
    if (answered) return false;
    answered = true;
  }
  deliver(std::move(o));
  return true;
}

bool Waiter::Pending::is_answered() {
  std::lock_guard lock(mutex);
  return answered;
}

void Waiter::Pending::note(std::optional<TaskRecord> record) {
  std::lock_guard lock(mutex);
  last = std::move(record);
  read = true;
  trouble.clear();
}

Waiter::Waiter(const ConnectionConfig& config, std::vector<std::string> queues)
    : queues_(std::move(queues)), reader_(config) {
  for (const std::string& q : queues_) events_.push_back(events_key(q));
}

Waiter::~Waiter() {
  thread_.request_stop();
  deadline_thread_.request_stop();
  cv_.notify_all();
  deadline_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (deadline_thread_.joinable()) deadline_thread_.join();
  // Waits still open get an answer rather than a broken promise. (The threads have ended:
  // waiting_ is no longer the first one's alone.)
  std::lock_guard lock(mutex_);
  const auto abandon = [](Pending& p) {
    p.answer({WaitOutcome::Kind::timed_out, std::nullopt,
              "the Producer waiting for task " + p.task_id + " was destroyed"});
  };
  for (auto& p : incoming_) abandon(*p);
  for (auto& [id, p] : waiting_) abandon(*p);
}

TaskRecord WaitOutcome::take() && {
  switch (kind) {
    case Kind::done: break;
    case Kind::failed: throw TaskFailedError(message, std::move(*record));
    case Kind::timed_out: throw WaitTimeoutError(message, std::move(record));
  }
  return std::move(*record);
}

void Waiter::complete(Pending& p, const TaskRecord& r) {
  if (r.state == TaskRecord::State::done) {
    p.answer({WaitOutcome::Kind::done, r, ""});
  } else {
    p.answer({WaitOutcome::Kind::failed, r, describe_failure(r)});
  }
}

WaitOutcome Waiter::timed_out(Pending& p) {
  std::lock_guard lock(p.mutex);
  std::string m;
  if (p.last) {
    m = "task " + p.task_id + " did not finish in time (it is " + std::string(to_string(p.last->state)) + ")";
  } else if (!p.trouble.empty()) {
    m = "task " + p.task_id + " did not finish in time: its record could not be read (" + p.trouble + ")";
  } else if (p.read) {
    m = "no record of task " + p.task_id + std::string(kNoRecord);
  } else {
    m = "task " + p.task_id + " did not finish in time (its record was not read yet)";
  }
  return {WaitOutcome::Kind::timed_out, p.last, std::move(m)};
}

std::optional<TaskRecord> Waiter::read_record(const std::string& task_id, std::vector<std::size_t>& queues) {
  std::vector<std::string> keys;  // the argvs' strings
  keys.reserve(queues.size());
  std::vector<Argv> argvs;
  argvs.reserve(queues.size());
  std::vector<ScriptId> ids(queues.size(), ScriptId::watch);
  for (const std::size_t q : queues) {
    Argv argv = scripts_.begin(ScriptId::watch, 1);
    argv.add(keys.emplace_back(task_key(queues_[q], task_id)));
    argvs.push_back(std::move(argv));
  }
  const std::vector<Reply> replies = scripts_.call_pipelined(ids, argvs);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (auto r = parse_record(replies[i].view().check(), task_id, queues_[queues[i]])) {
      queues = {queues[i]};  // found: it is in this partition
      return r;
    }
  }
  return std::nullopt;
}

void Waiter::wait(const std::string& task_id, Millis timeout, std::optional<std::size_t> partition,
                  bool for_enqueue, std::function<void(WaitOutcome)> deliver) {
  // (Not make_shared: the deadline keeper's weak_ptr would keep the object's memory until then.)
  PendingPtr p(new Pending);
  p->task_id = task_id;
  p->deliver = std::move(deliver);
  p->deadline = Clock::now() + timeout;
  p->for_enqueue = for_enqueue;
  if (partition) {
    p->queues = {*partition};
  } else {
    for (std::size_t i = 0; i < queues_.size(); ++i) p->queues.push_back(i);
  }
  bool earliest = false;
  {
    std::lock_guard lock(mutex_);
    earliest = deadlines_.empty() || p->deadline < deadlines_.begin()->first;
    deadlines_.emplace(p->deadline, p);
    incoming_.push_back(std::move(p));
    if (!thread_.joinable()) thread_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
    if (!deadline_thread_.joinable()) {
      deadline_thread_ = std::jthread([this](const std::stop_token& stop) { keep_deadlines(stop); });
    }
  }
  cv_.notify_all();
  if (earliest) deadline_cv_.notify_all();
}

void Waiter::keep_deadlines(const std::stop_token& stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    if (deadlines_.empty()) {
      deadline_cv_.wait(lock, stop, [&] { return !deadlines_.empty(); });
      continue;
    }
    const Clock::time_point due = deadlines_.begin()->first;
    if (Clock::now() < due) {
      deadline_cv_.wait_until(lock, stop, due,
                              [&] { return !deadlines_.empty() && deadlines_.begin()->first < due; });
      continue;
    }
    const PendingPtr p = deadlines_.begin()->second.lock();
    deadlines_.erase(deadlines_.begin());
    if (!p) continue;
    lock.unlock();
    p->answer(timed_out(*p));  // (nothing when it was answered already)
    lock.lock();
  }
}

bool Waiter::read_events(Millis block, std::vector<std::pair<QueueEvent, std::size_t>>& finished) {
  // One XREAD over every stream; on a cluster the streams of several partitions may be in
  // several slots, which one command cannot name: one XREAD each, the block shared out.
  const bool one_command = !reader_.config().endpoint.is_cluster() || queues_.size() == 1;
  std::vector<std::vector<std::size_t>> groups;
  if (one_command) {
    groups.emplace_back();
    for (std::size_t i = 0; i < queues_.size(); ++i) groups.back().push_back(i);
  } else {
    for (std::size_t i = 0; i < queues_.size(); ++i) groups.push_back({i});
  }
  const Millis each = std::max(Millis(1), block / static_cast<std::int64_t>(groups.size()));
  bool full = false;
  for (const auto& group : groups) {
    Argv argv{"XREAD", "COUNT"};
    argv.add(kPage).add("BLOCK").add(static_cast<std::int64_t>(each.count())).add("STREAMS");
    for (const std::size_t i : group) argv.add(events_[i]);
    for (const std::size_t i : group) argv.add(positions_[i]);
    const Reply r = reader_.command(argv);
    const ReplyView v = r.view().check();
    if (v.is_nil()) continue;
    for (std::size_t s = 0; s < v.size(); ++s) {
      const std::string_view key = v[s][0].str();
      const auto it = std::find(events_.begin(), events_.end(), key);
      if (it == events_.end()) continue;
      const auto q = static_cast<std::size_t>(it - events_.begin());
      const ReplyView entries = v[s][1];
      full = full || static_cast<std::int64_t>(entries.size()) >= kPage;
      for (std::size_t e = 0; e < entries.size(); ++e) {
        QueueEvent event = parse_event(entries[e], queues_[q]);
        positions_[q] = event.id;
        if (is_final_event(event.event)) finished.emplace_back(std::move(event), q);
      }
    }
  }
  return full;
}

void Waiter::remember(const QueueEvent& event, std::size_t queue) {
  auto [it, added] = ended_.insert_or_assign(event.task_id, std::pair{ended_by(event), queue});
  if (!added) return;
  ended_order_.push_back(it->first);
  if (ended_order_.size() > kRemembered) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

void Waiter::settle(const std::string& task_id, std::size_t queue,
                    const std::optional<TaskRecord>& fallback) {
  if (waiting_.count(task_id) == 0) return;
  std::vector<std::size_t> where{queue};
  std::optional<TaskRecord> r = read_record(task_id, where);
  if (!r || !r->finished()) {
    if (r || !fallback) return;  // enqueued again under its id since: not finished after all
    r = fallback;                // its record went with its end (retention 0)
  }
  const auto [from, to] = waiting_.equal_range(task_id);
  for (auto it = from; it != to; ++it) complete(*it->second, *r);
  waiting_.erase(from, to);
}

void Waiter::adopt() {
  std::vector<PendingPtr> fresh;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(incoming_);
  }
  for (auto& p : fresh) waiting_.emplace(p->task_id, std::move(p));
}

void Waiter::check_records(bool all) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Pending& p = *it->second;
    if (p.is_answered()) {
      it = waiting_.erase(it);
      continue;
    }
    if (p.checked && !all) {
      ++it;
      continue;
    }
    std::optional<TaskRecord> r = read_record(p.task_id, p.queues);
    p.checked = true;
    if (!r) {
      // Its record went with its end (Retention::done = 0) after the thread read the end?
      if (const auto ended = ended_.find(p.task_id); ended != ended_.end()) {
        complete(p, ended->second.first);
        it = waiting_.erase(it);
        continue;
      }
      if (!p.for_enqueue && !p.missing_since) p.missing_since = Clock::now();
    } else {
      p.missing_since.reset();
    }
    it = answered_by(p, std::move(r)) ? waiting_.erase(it) : std::next(it);
  }
}

bool Waiter::answered_by(Pending& p, std::optional<TaskRecord> r) {
  const bool finished = r && r->finished();
  p.note(std::move(r));
  if (finished) complete(p, *p.last);
  return finished;
}

void Waiter::sweep(Clock::time_point now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Pending& p = *it->second;
    if (p.is_answered()) {
      it = waiting_.erase(it);
      continue;
    }
    if (!p.missing_since || now - *p.missing_since < kNoRecordGrace) {
      ++it;
      continue;
    }
    // No record for the grace period: once more, then it fails saying so.
    std::optional<TaskRecord> r = read_record(p.task_id, p.queues);
    if (!r) {
      p.answer({WaitOutcome::Kind::timed_out, std::nullopt,
                "no record of task " + p.task_id + std::string(kNoRecord)});
      it = waiting_.erase(it);
      continue;
    }
    p.missing_since.reset();
    it = answered_by(p, std::move(r)) ? waiting_.erase(it) : std::next(it);
  }
}

void Waiter::run(const std::stop_token& stop) {
  block_sigpipe_for_this_thread();
  positions_.assign(queues_.size(), "");
  Backoff backoff(reader_.config().backoff_base, reader_.config().backoff_max);
  // After a failed round every open wait reads its record again: the positions may have moved
  // past final events that were read but not settled.
  bool recheck = false;
  while (!stop.stop_requested()) {
    try {
      reader_.connect();
      // Where the thread starts reading each stream: its newest event now. What a wait needs of
      // the time before is in the record it reads after this (below).
      for (std::size_t i = 0; i < queues_.size(); ++i) {
        if (!positions_[i].empty()) continue;
        const Reply r = reader_.command(Argv{"XREVRANGE", events_[i], "+", "-", "COUNT", "1"});
        const ReplyView v = r.view().check();
        positions_[i] = v.size() > 0 ? std::string(v[0][0].str()) : "0-0";
      }
      // New waits: their records, read after the positions were set, so an end after this read
      // is an event the next read sees.
      adopt();
      check_records(std::exchange(recheck, false));
      sweep(Clock::now());
      if (waiting_.empty()) {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, stop, [&] { return !incoming_.empty(); });
        continue;
      }
      std::vector<std::pair<QueueEvent, std::size_t>> finished;
      const bool full = read_events(kBlock, finished);
      // Waits that came during the read take part: a final event of theirs that it read counts
      // (their records are read next round; one that went with the task's end is remembered).
      adopt();
      for (const auto& [event, q] : finished) {
        remember(event, q);
        settle(event.task_id, q, ended_by(event));
      }
      // A full page: the stream may have been trimmed past events not read.
      recheck = full;
      backoff.reset();
    } catch (const std::exception& e) {
      reader_.disconnect();
      recheck = true;
      adopt();
      for (auto& [id, p] : waiting_) {
        std::lock_guard lock(p->mutex);
        p->trouble = e.what();
      }
      backoff.fail();
      const Millis delay = backoff.delay();
      log(LogLevel::warning, std::string("waiting for tasks: ") + e.what() + "; retrying in " +
                                 std::to_string(delay.count()) + " ms");
      std::unique_lock lock(mutex_);
      cv_.wait_for(lock, stop, delay, [] { return false; });
    }
  }
}

}  // namespace streamq::detail
