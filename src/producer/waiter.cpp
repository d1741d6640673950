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
// is first checked by the thread, a timeout is noticed, and a stop is.
constexpr Millis kBlock{100};
constexpr std::int64_t kPage = 1000;  // events per stream per read

std::string describe_failure(const TaskRecord& r) {
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

Waiter::Waiter(const ConnectionConfig& config, std::vector<std::string> queues)
    : queues_(std::move(queues)), reader_(config), looker_(config) {
  for (const std::string& q : queues_) events_.push_back(events_key(q));
}

Waiter::~Waiter() {
  if (thread_.joinable()) {
    thread_.request_stop();
    cv_.notify_all();
    thread_.join();
  }
  // Waits still open get an answer rather than a broken promise. (The thread has ended:
  // waiting_ is no longer its alone.)
  std::lock_guard lock(mutex_);
  const auto abandon = [](Pending& p) {
    p.deliver({WaitOutcome::Kind::timed_out, p.last,
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
    p.deliver({WaitOutcome::Kind::done, r, ""});
  } else {
    p.deliver({WaitOutcome::Kind::failed, r, describe_failure(r)});
  }
}

std::optional<TaskRecord> Waiter::read_record(Connection& conn, const std::string& task_id,
                                              std::vector<std::size_t>& queues) {
  std::vector<std::string> keys;  // the argvs' strings
  keys.reserve(queues.size());
  std::vector<Argv> argvs;
  argvs.reserve(queues.size());
  for (const std::size_t q : queues)
    argvs.push_back(Argv{"HGETALL", keys.emplace_back(task_key(queues_[q], task_id))});
  const std::vector<Reply> replies = conn.pipeline(argvs);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (auto r = parse_record(replies[i].view().check(), task_id, queues_[queues[i]])) {
      queues = {queues[i]};  // found: it is in this partition
      return r;
    }
  }
  return std::nullopt;
}

void Waiter::wait(const std::string& task_id, Millis timeout, std::optional<std::size_t> partition,
                  std::function<void(WaitOutcome)> deliver) {
  auto p = std::make_unique<Pending>();
  p->task_id = task_id;
  p->deliver = std::move(deliver);
  p->deadline = Clock::now() + timeout;
  if (partition) {
    p->queues = {*partition};
  } else {
    for (std::size_t i = 0; i < queues_.size(); ++i) p->queues.push_back(i);
  }
  {
    // A task that finished before the wait began is answered from its record, here.
    std::lock_guard look(look_mutex_);
    looker_.connect_with_backoff();
    p->last = read_record(looker_, task_id, p->queues);
  }
  if (p->last && p->last->finished()) {
    complete(*p, *p->last);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    incoming_.push_back(std::move(p));
    if (!thread_.joinable()) thread_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
  }
  cv_.notify_all();
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

void Waiter::settle(const std::string& task_id, std::size_t queue,
                    const std::optional<TaskRecord>& fallback) {
  if (waiting_.count(task_id) == 0) return;
  std::vector<std::size_t> where{queue};
  std::optional<TaskRecord> r = read_record(reader_, task_id, where);
  if (!r || !r->finished()) {
    if (r || !fallback) return;  // enqueued again under its id since: not finished after all
    r = fallback;                // its record went with its end (retention 0)
  }
  const auto [from, to] = waiting_.equal_range(task_id);
  for (auto it = from; it != to; ++it) complete(*it->second, *r);
  waiting_.erase(from, to);
}

void Waiter::adopt() {
  std::vector<std::unique_ptr<Pending>> fresh;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(incoming_);
  }
  for (auto& p : fresh) waiting_.emplace(p->task_id, std::move(p));
}

void Waiter::check_records(bool all) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Pending& p = *it->second;
    if (p.checked && !all) {
      ++it;
      continue;
    }
    p.last = read_record(reader_, p.task_id, p.queues);
    p.checked = true;
    if (p.last && p.last->finished()) {
      complete(p, *p.last);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

void Waiter::expire(Clock::time_point now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Pending& p = *it->second;
    if (now < p.deadline) {
      ++it;
      continue;
    }
    p.deliver({WaitOutcome::Kind::timed_out, p.last,
               p.last
                   ? "task " + p.task_id + " did not finish in time (it is " +
                         std::string(to_string(p.last->state)) + ")"
                   : "no record of task " + p.task_id +
                         " was found: it was not enqueued with a Retention (EnqueueOptions::retention), its "
                         "record expired, or it is another queue's"});
    it = waiting_.erase(it);
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
      expire(Clock::now());
      if (waiting_.empty()) {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, stop, [&] { return !incoming_.empty(); });
        continue;
      }
      std::vector<std::pair<QueueEvent, std::size_t>> finished;
      const bool full = read_events(kBlock, finished);
      // Waits that came during the read take part: a final event of theirs that it read counts
      // (their records are read next round; one that went with the task's end is the event's).
      adopt();
      for (const auto& [event, q] : finished) settle(event.task_id, q, ended_by(event));
      // A full page: the stream may have been trimmed past events not read.
      recheck = full;
      backoff.reset();
    } catch (const std::exception& e) {
      reader_.disconnect();
      recheck = true;
      backoff.fail();
      const Millis delay = backoff.delay();
      log(LogLevel::warning, std::string("waiting for tasks: ") + e.what() + "; retrying in " +
                                 std::to_string(delay.count()) + " ms");
      std::unique_lock lock(mutex_);
      cv_.wait_for(lock, stop, delay, [] { return false; });
      expire(Clock::now());  // what cannot be read must not keep its callers past their time
    }
  }
}

}  // namespace streamq::detail
