// SPDX-License-Identifier: MIT
#include "shared_connection.hpp"

#include <utility>

#include "cluster.hpp"
#include "connection.hpp"

namespace streamq::detail {

namespace {

/// Rounds a writer leads after its own request was answered while more are queued, before it
/// passes the role on (its caller waits that much longer; the connection stays busy meanwhile).
constexpr int kRoundsPastOwn = 2;

/// Not run where it went, and may be sent again as it is.
bool not_run(const Reply& r) {
  if (!r.view().is_error()) return false;
  const std::string_view e = r.view().error();
  return ScriptRunner::is_noscript(r) || parse_redirect(e).has_value() || e.starts_with("TRYAGAIN");
}

}  // namespace

SharedConnection::SharedConnection(ConnectionConfig config) : conn_(std::move(config)), scripts_(conn_) {}

SharedConnection::~SharedConnection() { close(); }

void SharedConnection::close() {
  {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    completion_wake_.notify_all();
  }
  if (completion_thread_.joinable()) completion_thread_.join();
}

std::vector<Reply> SharedConnection::run(const std::vector<SharedCommand>& commands, bool rerun_not_run) {
  Request r;
  r.commands = commands;
  r.rerun = rerun_not_run;
  SharedOutcome o = wait_for(r);
  if (o.error) std::rethrow_exception(o.error);
  return std::move(o.replies);
}

void SharedConnection::run_alone(const Alone& alone) {
  Request r;
  r.alone = alone;
  SharedOutcome o = wait_for(r);
  if (o.error) std::rethrow_exception(o.error);
}

SharedOutcome SharedConnection::wait_for(Request& r) {
  std::condition_variable wake;
  r.wake = &wake;
  std::unique_lock lock(mutex_);
  queue_.push_back(&r);
  ++sync_queued_;
  while (!r.done) {
    if (!leading_) {
      lead(lock, &r);
    } else {
      wake.wait(lock);
    }
  }
  return std::move(r.outcome);
}

void SharedConnection::submit(std::vector<SharedCommand> commands, bool rerun_not_run, Completion done) {
  auto r = std::make_unique<Request>();
  r->commands = std::move(commands);
  r->rerun = rerun_not_run;
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
  queue_.push_back(r.release());
  // No writer: the completion thread writes it (the caller does not wait).
  if (!leading_) completion_wake_.notify_one();
}

void SharedConnection::lead(std::unique_lock<std::mutex>& lock, const Request* until) {
  leading_ = true;
  int past_own = 0;
  std::vector<Request*> batch;
  while (!queue_.empty()) {
    if (until != nullptr && until->done && ++past_own > kRoundsPastOwn) break;
    if (until == nullptr && !completed_.empty()) break;  // the completion thread: its callbacks first
    batch.assign(queue_.begin(), queue_.end());
    queue_.clear();
    sync_queued_ = 0;
    lock.unlock();
    write(batch);
    lock.lock();
    bool completions = false;
    for (Request* r : batch) {
      r->done = true;
      if (r->completion) {
        completed_.emplace_back(r);
        completions = true;
      } else if (r != until) {
        r->wake->notify_one();
      }
    }
    if (completions) completion_wake_.notify_one();
  }
  leading_ = false;
  pass_on();
}

void SharedConnection::pass_on() {
  // The first synchronous caller queued, and the completion thread when an asynchronous request
  // is queued: the thread that leads the completions may itself be waiting in a synchronous call
  // made from a completion, so both are told, and the one that finds no writer writes.
  bool async_queued = false;
  bool sync_told = false;
  for (Request* r : queue_) {
    if (r->wake == nullptr) {
      async_queued = true;
    } else if (!sync_told) {
      r->wake->notify_one();
      sync_told = true;
    }
    if (async_queued && (sync_told || sync_queued_ == 0)) break;
  }
  if (async_queued) completion_wake_.notify_one();
}

void SharedConnection::write(std::vector<Request*>& batch) {
  try {
    conn_.connect_with_backoff();
  } catch (...) {
    for (Request* r : batch) r->outcome.error = std::current_exception();
    return;
  }
  // Runs of pipelined requests, each written in one go, with the requests that run alone between.
  for (std::size_t first = 0; first < batch.size();) {
    if (batch[first]->alone) {
      Request& r = *batch[first++];
      try {
        r.alone(conn_, scripts_);
      } catch (...) {
        r.outcome.error = std::current_exception();
      }
      continue;
    }
    std::size_t last = first;
    while (last < batch.size() && !batch[last]->alone) ++last;
    write_pipelined(batch, first, last);
    first = last;
  }
}

void SharedConnection::write_pipelined(std::vector<Request*>& batch, std::size_t first, std::size_t last) {
  std::size_t appended = first;  // requests [first, appended) are on the wire
  std::size_t answered = first;  // requests [first, answered) have all their replies
  try {
    for (; appended < last; ++appended) {
      for (SharedCommand& c : batch[appended]->commands) {
        if (c.script != not_a_script) scripts_.choose_head(c.script, *c.argv);
        conn_.append(*c.argv);
      }
    }
    conn_.flush();
    for (; answered < last; ++answered) {
      Request& r = *batch[answered];
      r.outcome.replies.reserve(r.commands.size());
      for (const SharedCommand& c : r.commands) {
        r.outcome.replies.push_back(conn_.read_reply());
        if (c.script != not_a_script) scripts_.note_reply(c.script, r.outcome.replies.back());
      }
    }
  } catch (...) {
    // The connection is gone (Connection drops it on any I/O error): what was written and not
    // answered has an unknown outcome, what was not written was not sent.
    const std::exception_ptr e = std::current_exception();
    if (conn_.owes_replies()) conn_.disconnect();  // replies owed to no one would answer the next calls
    for (std::size_t i = answered; i < last; ++i) {
      batch[i]->outcome.replies.clear();
      batch[i]->outcome.error = e;
    }
    return;
  }
  // Nothing is owed now: the commands not run where they went are sent again, one at a time.
  for (std::size_t i = first; i < last; ++i) {
    if (batch[i]->rerun) rerun(*batch[i]);
  }
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
    completion_wake_.wait(lock, [&] {
      return stopping_ || !completed_.empty() || (!leading_ && !queue_.empty());
    });
    if (!completed_.empty()) {
      std::vector<std::unique_ptr<Request>> ready;
      ready.swap(completed_);
      lock.unlock();
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
    if (!leading_ && !queue_.empty()) {
      lead(lock, nullptr);
      continue;
    }
    if (stopping_) return;
  }
}

}  // namespace streamq::detail
