// SPDX-License-Identifier: MIT
#include "shared_connection.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "cluster.hpp"
#include "connection.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {

namespace {

/// Commands appended between two writes to the socket.
constexpr std::size_t kFlushEvery = 8;

/// Not run where it went, and may be sent again as it is.
bool not_run(const Reply& r) {
  if (!r.view().is_error()) return false;
  const std::string_view e = r.view().error();
  return ScriptRunner::is_noscript(r) || parse_redirect(e).has_value() || e.starts_with("TRYAGAIN");
}

}  // namespace

SharedConnection::SharedConnection(ConnectionConfig config)
    : conn_(std::move(config)), scripts_(conn_), wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (wake_fd_ < 0) throw ConnectionError("eventfd: " + std::string(std::strerror(errno)));
}

SharedConnection::~SharedConnection() {
  close();
  ::close(wake_fd_);
}

void SharedConnection::close() {
  if (on_completion_thread()) {
    // A completion destroyed its own Producer: the thread would have to join itself, and then
    // run on in freed memory. A misuse the documentation names; stop here, loudly.
    std::fputs(
        "streamq: a Producer was destroyed by one of its own completions (on its completion "
        "thread): keep it alive until its completions have run\n",
        stderr);
    std::terminate();
  }
  {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    completion_wake_.notify_all();
  }
  if (completion_thread_.joinable()) completion_thread_.join();
}

std::vector<Reply> SharedConnection::run(const std::vector<SharedCommand>& commands, bool rerun_not_run,
                                         std::uint64_t* generation) {
  Request r;
  r.commands = commands;
  r.rerun = rerun_not_run;
  SharedOutcome o = wait_for(r);
  if (o.error) std::rethrow_exception(o.error);
  if (generation != nullptr) *generation = o.generation;
  return std::move(o.replies);
}

void SharedConnection::run_alone(const Alone& alone) {
  Request r;
  r.alone = alone;
  SharedOutcome o = wait_for(r);
  if (o.error) std::rethrow_exception(o.error);
}

SharedOutcome SharedConnection::run_merged(const Merge& merge, const void* item) {
  Request r;
  r.merge = &merge;
  r.item = item;
  r.rerun = true;
  return wait_for(r);
}

std::shared_ptr<SharedConnection::Waker> SharedConnection::this_threads_waker() {
  thread_local const std::shared_ptr<Waker> waker = std::make_shared<Waker>();
  return waker;
}

SharedOutcome SharedConnection::wait_for(Request& r) {
  r.wake = this_threads_waker();
  std::unique_lock lock(mutex_);
  queue_locked(&r);
  ++sync_waiting_;
  wake_writer_locked();
  while (!r.done) {
    if (!leading_) {
      lead(lock, &r);
    } else {
      unlock_and_wake(lock);
      r.wake->acquire();
      lock.lock();
    }
  }
  SharedOutcome outcome = std::move(r.outcome);
  unlock_and_wake(lock);
  return outcome;
}

void SharedConnection::unlock_and_wake(std::unique_lock<std::mutex>& lock) {
  std::vector<std::shared_ptr<Waker>> wake;
  wake.swap(to_wake_);
  lock.unlock();
  for (const auto& w : wake) w->release();
}

void SharedConnection::submit(std::vector<SharedCommand> commands, bool rerun_not_run, Completion done) {
  auto r = std::make_unique<Request>();
  r->commands = std::move(commands);
  r->rerun = rerun_not_run;
  r->completion = std::move(done);
  enqueue_async(std::move(r));
}

void SharedConnection::submit_merged(const Merge& merge, const void* item, Completion done) {
  auto r = std::make_unique<Request>();
  r->merge = &merge;
  r->item = item;
  r->rerun = true;
  r->completion = std::move(done);
  enqueue_async(std::move(r));
}

void SharedConnection::submit_alone(Alone alone, Completion done) {
  auto r = std::make_unique<Request>();
  r->alone = std::move(alone);
  r->completion = std::move(done);
  enqueue_async(std::move(r));
}

void SharedConnection::post(Completion done, SharedOutcome outcome) {
  auto r = std::make_unique<Request>();
  r->completion = std::move(done);
  r->outcome = std::move(outcome);
  r->done = true;
  std::unique_lock lock(mutex_);
  start_completion_thread();
  completed_.push_back(std::move(r));
  completion_wake_.notify_one();
}

void SharedConnection::start_completion_thread() {
  if (!completion_thread_.joinable()) completion_thread_ = std::thread([this] { completion_loop(); });
}

void SharedConnection::enqueue_async(std::unique_ptr<Request> r) {
  std::unique_lock lock(mutex_);
  start_completion_thread();
  queue_locked(r.release());
  // No one leads: the completion thread writes it (the caller does not wait).
  if (!leading_) completion_wake_.notify_one();
}

void SharedConnection::queue_locked(Request* r) {
  if (r->merge != nullptr && !queue_.empty()) {
    Request& last = *queue_.back();
    if (last.merge == r->merge && last.riders.size() + 1 < Merge::kMostItems) {
      last.riders.push_back(r);
      return;
    }
  }
  queue_.push_back(r);
}

void SharedConnection::wake_writer_locked() {
  if (returning_ > 0) --returning_;
  if (returning_ > 0 || !awaiting_ || woken_) return;
  woken_ = true;
  const std::uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) woken_ = false;  // (cannot fail: a counter far from full)
}

void SharedConnection::drain_wake_locked() {
  if (!woken_) return;
  std::uint64_t count = 0;
  if (::read(wake_fd_, &count, sizeof count) < 0) return;  // (EAGAIN: signalled, not yet seen)
  woken_ = false;
}

void SharedConnection::lead(std::unique_lock<std::mutex>& lock, const Request* until) {
  leading_ = true;
  for (;;) {
    // Pipelined requests are written as they come, behind replies still owed (and before the
    // leader leaves, so that a call queued meanwhile is on its way while the next leader wakes).
    // One that runs alone waits until nothing is owed, and so does everything queued behind it.
    std::vector<Request*> batch;
    while (reruns_.empty() && !queue_.empty() && !queue_.front()->alone) {
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    if (!batch.empty()) {
      unlock_and_wake(lock);
      std::vector<Request*> failed = write(batch);
      lock.lock();
      answer(failed, until);
    }
    if (until != nullptr ? until->done : !completed_.empty())
      break;  // the completion thread: callbacks first
    Request* alone = nullptr;
    if (in_flight_.empty() && reruns_.empty()) {
      if (queue_.empty()) break;             // nothing queued or owed
      if (!queue_.front()->alone) continue;  // queued after a failed write: write it
      alone = queue_.front();
      queue_.pop_front();
    }
    awaiting_ = alone == nullptr;
    unlock_and_wake(lock);
    std::vector<Request*> answered = alone != nullptr ? run_alone_now(*alone) : read_oldest();
    lock.lock();
    awaiting_ = false;
    drain_wake_locked();
    answer(answered, until);
  }
  leading_ = false;
  pass_on();
}

void SharedConnection::answer(const std::vector<Request*>& answered, const Request* until) {
  bool completions = false;
  std::size_t woken = 0;
  auto done = [&](Request* r) {
    r->done = true;
    if (r->completion) {
      completed_.emplace_back(r);
      completions = true;
    } else {
      --sync_waiting_;
      ++woken;
      if (r != until) wake_later(*r);
    }
  };
  for (Request* r : answered) {
    if (r->merge != nullptr) split_merged(*r);
    for (Request* rider : r->riders) done(rider);
    done(r);  // last: an asynchronous one is the completion thread's from here on
  }
  if (woken > 0) returning_ = woken;
  if (completions) completion_wake_.notify_one();
}

void SharedConnection::split_merged(Request& r) {
  const std::size_t n = r.riders.size() + 1;
  auto item = [&](std::size_t i) {
    return r.outcome.error ? r.outcome.error : r.merge->outcome(r.outcome.replies.at(0), i, n);
  };
  for (std::size_t i = 0; i < r.riders.size(); ++i) {
    r.riders[i]->outcome.error = item(i + 1);
    r.riders[i]->outcome.generation = r.outcome.generation;
  }
  r.outcome.error = item(0);
  r.outcome.replies.clear();
}

void SharedConnection::pass_on() {
  // The owner of the oldest request left leads next. The completion thread may itself be
  // waiting in a synchronous call made from a completion, so the oldest synchronous caller is
  // told too, and the one that finds no leader leads.
  bool async_left = false;
  bool sync_told = sync_waiting_ == 0;
  auto visit_one = [&](Request* r) {
    if (r->wake == nullptr) {
      async_left = true;
    } else if (!sync_told) {
      wake_later(*r);
      sync_told = true;
    }
  };
  auto visit = [&](Request* r) {  // a request and its riders
    visit_one(r);
    for (Request* rider : r->riders) visit_one(rider);
    return !(async_left && sync_told);
  };
  bool more = true;
  // Oldest first: the requests to send again, those written, those queued.
  for (auto it = reruns_.begin(); more && it != reruns_.end(); ++it) more = visit(*it);
  for (auto it = in_flight_.begin(); more && it != in_flight_.end(); ++it) more = visit(*it);
  for (auto it = queue_.begin(); more && it != queue_.end(); ++it) more = visit(*it);
  if (async_left) completion_wake_.notify_one();
}

std::vector<SharedConnection::Request*> SharedConnection::build_merged(std::vector<Request*>& batch) {
  std::vector<Request*> failed;
  std::vector<const void*> items;
  auto built = [&](Request* r) {
    if (r->merge == nullptr) return true;
    try {
      items.clear();
      items.push_back(r->item);
      for (const Request* rider : r->riders) items.push_back(rider->item);
      r->merged = r->merge->build(items);
      r->commands = {{&r->merged, r->merge->script()}};
      return true;
    } catch (...) {
      r->outcome.error = std::current_exception();
      failed.push_back(r);
      return false;
    }
  };
  batch.erase(std::remove_if(batch.begin(), batch.end(), [&](Request* r) { return !built(r); }), batch.end());
  return failed;
}

std::vector<SharedConnection::Request*> SharedConnection::write(std::vector<Request*>& batch) {
  std::vector<Request*> failed = build_merged(batch);
  if (batch.empty()) return failed;
  try {
    if (in_flight_.empty()) conn_.connect_with_backoff();
    // Flushed every kFlushEvery commands: Redis starts on the first ones while the rest are
    // encoded (a batch's chunks are large).
    std::size_t unflushed = 0;
    for (Request* r : batch) {
      for (SharedCommand& c : r->commands) {
        if (c.script != not_a_script) scripts_.choose_head(c.script, *c.argv);
        conn_.append(*c.argv);
        if (++unflushed == kFlushEvery) {
          conn_.flush();
          unflushed = 0;
        }
      }
    }
    conn_.flush();
  } catch (...) {
    // Nothing of the batch was sent, or what was is lost with the connection: it fails, with
    // everything owed (Connection drops itself on an I/O error).
    std::vector<Request*> owed = fail_owed(std::current_exception(), std::move(batch));
    owed.insert(owed.end(), failed.begin(), failed.end());
    return owed;
  }
  const std::uint64_t generation = conn_.generation();
  const std::lock_guard lock(mutex_);
  for (Request* r : batch) r->outcome.generation = generation;
  in_flight_.insert(in_flight_.end(), batch.begin(), batch.end());
  return failed;
}

std::vector<SharedConnection::Request*> SharedConnection::read_oldest() {
  std::vector<Request*> answered;
  if (in_flight_.empty()) {
    // Nothing is owed: the replies that said "not run" are sent again, one at a time.
    {
      const std::lock_guard lock(mutex_);  // (others look at reruns_ under the lock)
      answered.swap(reruns_);
    }
    for (Request* r : answered) rerun(*r);
    return answered;
  }
  Request& r = *in_flight_.front();
  try {
    r.outcome.replies.reserve(r.commands.size());
    while (r.outcome.replies.size() < r.commands.size()) {
      if (!conn_.await_reply(wake_fd_)) return {};  // a caller's request to write first
      const SharedCommand& c = r.commands[r.outcome.replies.size()];
      r.outcome.replies.push_back(conn_.read_reply());
      if (c.script != not_a_script) scripts_.note_reply(c.script, r.outcome.replies.back());
    }
  } catch (...) {
    return fail_owed(std::current_exception());
  }
  const std::lock_guard lock(mutex_);
  in_flight_.pop_front();
  const bool again = r.rerun && std::any_of(r.outcome.replies.begin(), r.outcome.replies.end(), not_run);
  if (again) {
    reruns_.push_back(&r);  // no more writes until it was sent again
  } else {
    answered.push_back(&r);
  }
  return answered;
}

std::vector<SharedConnection::Request*> SharedConnection::run_alone_now(Request& r) {
  try {
    // No connect here: a WAIT must not go to a new connection, which has written nothing (it
    // uses Connection::command_here, which refuses); a command connects on its own.
    r.alone(conn_, scripts_);
  } catch (...) {
    r.outcome.error = std::current_exception();
  }
  if (conn_.owes_replies()) conn_.disconnect();  // an alone left replies unread: no one reads them
  return {&r};
}

std::vector<SharedConnection::Request*> SharedConnection::fail_owed(const std::exception_ptr& error,
                                                                    std::vector<Request*> also) {
  if (conn_.owes_replies()) conn_.disconnect();  // replies owed to no one would answer the next calls
  const std::lock_guard lock(mutex_);
  std::vector<Request*> failed(in_flight_.begin(), in_flight_.end());
  in_flight_.clear();
  failed.insert(failed.end(), reruns_.begin(), reruns_.end());
  reruns_.clear();
  failed.insert(failed.end(), also.begin(), also.end());
  for (Request* r : failed) {
    r->outcome.replies.clear();
    r->outcome.error = error;
  }
  return failed;
}

void SharedConnection::rerun(Request& r) {
  try {
    for (std::size_t k = 0; k < r.commands.size(); ++k) {
      Reply& reply = r.outcome.replies[k];
      if (!not_run(reply)) continue;
      SharedCommand& c = r.commands[k];
      reply = c.script != not_a_script ? scripts_.call(c.script, *c.argv) : conn_.command(*c.argv);
    }
  } catch (...) {
    r.outcome.replies.clear();
    r.outcome.error = std::current_exception();
  }
}

void SharedConnection::completion_loop() {
  block_sigpipe_for_this_thread();
  std::unique_lock lock(mutex_);
  for (;;) {
    auto work_left = [&] { return !queue_.empty() || !in_flight_.empty() || !reruns_.empty(); };
    completion_wake_.wait(lock,
                          [&] { return stopping_ || !completed_.empty() || (!leading_ && work_left()); });
    if (!completed_.empty()) {
      std::vector<std::unique_ptr<Request>> ready;
      ready.swap(completed_);
      unlock_and_wake(lock);
      for (auto& r : ready) {
        try {
          r->completion(std::move(r->outcome));
        } catch (...) {  // a completion must not throw; one that does loses only its own answer
        }
      }
      ready.clear();
      lock.lock();
      continue;
    }
    if (!leading_ && work_left()) {
      lead(lock, nullptr);
      unlock_and_wake(lock);  // (the callers it answered, before it waits)
      lock.lock();
      continue;
    }
    if (stopping_) return;
  }
}

}  // namespace streamq::detail
