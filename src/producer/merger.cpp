// SPDX-License-Identifier: MIT
#include "merger.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <string>

#include "redis/scripts.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {

namespace {

/// How task `i` of a merged call of `n` ended: written (null), refused (QueueFullError, as a
/// call of its own would be), or what failed the whole call.
std::exception_ptr outcome_of(const SharedOutcome& o, std::size_t i, std::size_t n) {
  if (o.error) return o.error;
  try {
    const ReplyView r = o.replies.at(0).view();
    r.check();  // the whole call failed (NOPERM, OOM, a script error): so did each of its tasks
    if (!r.is_array() || r.size() != n) throw ReplyError("ERR enqueue: unexpected reply to a merged call");
    const ReplyView mine = r[i];
    if (mine.is_error() && mine.error().starts_with("QUEUEFULL"))
      throw QueueFullError(std::string(mine.error()));
    mine.check();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

void EnqueueMerger::submit(std::shared_ptr<MergedTask> t) {
  std::unique_lock lock(mutex_);
  waiting_.push_back(std::move(t));
  kick_locked(lock);
}

void EnqueueMerger::flush() {
  std::unique_lock lock(mutex_);
  kick_locked(lock, std::numeric_limits<int>::max());
}

void EnqueueMerger::drain() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return waiting_.empty() && calls_ == 0; });
}

EnqueueMerger::Batch EnqueueMerger::take_locked() {
  Batch batch;
  while (!waiting_.empty() && batch.size() < kMostTasks) {
    batch.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  ++calls_;
  return batch;
}

void EnqueueMerger::kick_locked(std::unique_lock<std::mutex>& lock, int most) {
  while (!waiting_.empty() && calls_ < most) {
    Batch batch = take_locked();
    lock.unlock();
    send(batch);
    lock.lock();
  }
}

void EnqueueMerger::send(const Batch& batch) {
  auto argv = std::make_shared<Argv>();
  try {
    std::vector<const Prepared*> tasks;
    tasks.reserve(batch.size());
    for (const auto& t : batch) tasks.push_back(t->task);
    *argv = build_(tasks);
  } catch (...) {
    SharedOutcome failed;
    failed.error = std::current_exception();
    settle(batch, failed, false);
    return;
  }
  SharedCommand command{argv.get(), ScriptId::enqueue};
  try {
    link_.submit({command}, true, [this, argv, batch](const SharedOutcome& o) { settle(batch, o, true); });
  } catch (...) {  // not queued (bad_alloc): answered here, through the completion thread
    SharedOutcome failed;
    failed.error = std::current_exception();
    settle(batch, failed, false);
  }
}

namespace {

/// Whether the call failed on the way (the connection lost or not made, a timeout).
bool connection_failed(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ConnectionError&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

void EnqueueMerger::settle(const Batch& batch, const SharedOutcome& o, bool here) {
  SharedConnection& link = link_;  // (drain() may return, and this merger go, once the lock is left)
  Batch failed;  // what waited, when the connection failed: it fails too, as queued calls do
  {
    std::unique_lock lock(mutex_);
    --calls_;
    if (o.error && connection_failed(o.error)) {
      failed.assign(std::make_move_iterator(waiting_.begin()), std::make_move_iterator(waiting_.end()));
      waiting_.clear();
    }
    kick_locked(lock);
    if (waiting_.empty() && calls_ == 0) idle_.notify_all();
  }
  auto answer = [&](MergedTask& t, std::exception_ptr error) {
    // Taken out of the task, so nothing here holds the completion (a promise, say) or the error
    // once it ran: the caller that gets them is their last owner, as for a call of its own.
    auto done = std::move(t.done);
    t.done = nullptr;
    if (!here) {
      link.post([done = std::move(done), error = std::move(error)](
                    const SharedOutcome& posted) mutable { done(std::move(error), posted.generation); },
                SharedOutcome{{}, nullptr, o.generation});
      return;
    }
    try {
      done(std::move(error), o.generation);
    } catch (...) {  // a completion must not throw; one that does loses only its own answer
    }
  };
  for (std::size_t i = 0; i < batch.size(); ++i) answer(*batch[i], outcome_of(o, i, batch.size()));
  for (const auto& t : failed) answer(*t, o.error);
}

}  // namespace streamq::detail
