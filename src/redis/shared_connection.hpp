// SPDX-License-Identifier: MIT
// One connection shared by many threads, with automatic pipelining: the commands of calls that
// arrive while a round trip is in flight go out together in the next write, and each call gets
// its own replies, in order.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "connection.hpp"
#include "scripts.hpp"

namespace streamq::detail {

/// One command of a request: a script call (`script` set; its argv begun with
/// ScriptRunner::begin_shared, the EVALSHA/EVAL head chosen when it is written) or a plain one.
struct SharedCommand {
  Argv* argv = nullptr;  // kept alive by the caller until the request is answered
  ScriptId script = not_a_script;
};

/// A kind of call whose requests merge: the items of one Merge queued back to back ride in one
/// command, built when it is written (a partition's plain enqueues, src/producer/merged_enqueue.hpp).
/// An item is opaque here: a pointer its caller keeps alive until it is answered.
class Merge {
 public:
  /// Items in one command at most.
  static constexpr std::size_t kMostItems = 64;
  virtual ~Merge() = default;
  /// The command of `items`, in the order they were queued. May throw (the items fail with it).
  virtual Argv build(const std::vector<const void*>& items) const = 0;
  /// The script the command calls (or not_a_script).
  virtual ScriptId script() const = 0;
  /// How item `i` of the `n` of a command ended, from the command's reply: null when it was done.
  virtual std::exception_ptr outcome(const Reply& reply, std::size_t i, std::size_t n) const = 0;
};

/// What a request is answered with: one reply per command, or what ended it (ConnectionError,
/// TimeoutError, ... thrown while it was written or read; the replies read before are lost).
struct SharedOutcome {
  std::vector<Reply> replies;
  std::exception_ptr error;
  /// Connection::generation() when the request was written (a WAIT for it must find the same).
  std::uint64_t generation = 0;
};

/// A Connection and its ScriptRunner behind a queue of requests. There is no I/O thread for the
/// synchronous calls: the first caller that finds no one writing becomes the writer ("leader"),
/// writes every request queued, reads their replies, hands each its own, and passes the role on
/// to a waiting caller. Calls that arrive meanwhile queue up and go out together in the next
/// write: once the reply the leader waits for has come, or, for synchronous callers, as soon as
/// every caller that the last answer woke is queued again (the leader waits for its reply or for
/// that signal, so a round of callers goes out in one write without waiting a round trip).
/// A caller is woken after the lock is left, on its thread's own wake-up. Asynchronous requests are written
/// by whoever writes next, or by the completion thread (started at the first asynchronous request) when no
/// one does; their completions always run on that thread, never inside another caller's call.
///
/// A merged call (run_merged, submit_merged) joins the last request queued when that one is of
/// the same Merge and has room, else it is queued as a request that later ones may join. Since
/// it joins only the last request, and a request is written where it stands in the queue, the
/// calls of one thread are written in the order it made them, merged or not.
///
/// A request's commands are written back to back, in order, and no other request's command comes
/// between them; requests are written in the order they were queued. (A command sent again
/// because it was not run where it went goes on its own once nothing is owed: after the
/// requests written behind it.) After a connection failure
/// the requests whose replies were not all read fail with it (their outcome is unknown); the
/// next write connects again (after the connection's backoff).
class SharedConnection {
 public:
  using Completion = std::function<void(SharedOutcome)>;
  /// Runs with the connection to itself, nothing owed on it (a WAIT, a command that must follow
  /// its redirections, a script call that may fall back to EVAL).
  using Alone = std::function<void(Connection&, ScriptRunner&)>;

  explicit SharedConnection(ConnectionConfig config);
  /// close().
  ~SharedConnection();
  /// Answers every asynchronous request still queued (their completions run), then stops the
  /// completion thread. No call may be running or made afterwards. Idempotent.
  void close();
  SharedConnection(const SharedConnection&) = delete;
  SharedConnection& operator=(const SharedConnection&) = delete;

  /// Writes `commands` with whatever else is queued, and returns their replies. A command
  /// answered NOSCRIPT, MOVED, ASK or TRYAGAIN is sent again on its own when `rerun_not_run`
  /// (a script with EVAL, a redirection followed), else that reply is returned.
  /// @throws what writing or reading threw (ConnectionError, TimeoutError, ReplyError from the
  ///   session set-up).
  /// `generation`: set to the connection's generation when they were written.
  std::vector<Reply> run(const std::vector<SharedCommand>& commands, bool rerun_not_run,
                         std::uint64_t* generation = nullptr);
  /// Runs `alone` between the pipelined writes, in queue order. @throws what it throws.
  void run_alone(const Alone& alone);
  /// As run(), without waiting: `done` runs on the completion thread.
  void submit(std::vector<SharedCommand> commands, bool rerun_not_run, Completion done);
  /// As run_alone(), without waiting: `done` (with an empty replies vector) runs on the completion
  /// thread.
  void submit_alone(Alone alone, Completion done);

  /// Runs `item` of `merge` (see Merge) and returns how it ended: the outcome's error is what
  /// the command's reply says of the item (Merge::outcome), or what ended the command; replies
  /// are empty. Its command is sent again on its own when it was not run where it went (as
  /// run() with `rerun_not_run`). Blocks; answered by whichever thread reads the reply.
  SharedOutcome run_merged(const Merge& merge, const void* item);
  /// As run_merged(), without waiting: `done` runs on the completion thread.
  void submit_merged(const Merge& merge, const void* item, Completion done);

  /// Runs `done` with `outcome` on the completion thread, without writing anything (an
  /// asynchronous call refused before it was queued is answered where the others are).
  void post(Completion done, SharedOutcome outcome);

  const ConnectionConfig& config() const noexcept { return conn_.config(); }
  /// Whether the caller runs on the completion thread (inside a completion).
  bool on_completion_thread() const {
    return completion_thread_.joinable() && completion_thread_.get_id() == std::this_thread::get_id();
  }

 private:
  /// A thread's wake-up: released after the lock is left (a woken caller does not then block on
  /// it), and shared, so a caller that returns meanwhile leaves nothing dangling. A release no
  /// wait took makes a later wait return early, which re-checks and waits again.
  class Waker {
   public:
    void release() {
      {
        const std::lock_guard lock(mutex_);
        set_ = true;
      }
      cv_.notify_one();
    }
    void acquire() {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return set_; });
      set_ = false;
    }

   private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool set_ = false;
  };
  /// The calling thread's.
  static std::shared_ptr<Waker> this_threads_waker();

  struct Request {
    std::vector<SharedCommand> commands;
    Alone alone;
    bool rerun = false;
    Completion completion;  // set for an asynchronous request
    SharedOutcome outcome;
    bool done = false;
    std::shared_ptr<Waker> wake;  // a synchronous caller's thread's, to wake it
    // A merged call: its Merge and item. The first of a command's items is its request in the
    // queue; the later ones ride in it, answered with it. Its command is built when written.
    const Merge* merge = nullptr;
    const void* item = nullptr;
    std::vector<Request*> riders;
    Argv merged;
  };

  SharedOutcome wait_for(Request& request);
  /// With the lock held: `r` joins the last request queued (a merged call of the same Merge with
  /// room), else it goes to the back of the queue.
  void queue_locked(Request* r);
  /// With the lock held: `r`'s caller is to be woken once the lock is left.
  void wake_later(const Request& r) { to_wake_.push_back(r.wake); }
  /// Leaves the lock and wakes the callers wake_later() named.
  void unlock_and_wake(std::unique_lock<std::mutex>& lock);
  /// With the lock held, a synchronous request just queued: signals the leader to write when it
  /// waits for a reply and the callers the last answer woke are all queued again.
  void wake_writer_locked();
  /// With the lock held, the leader back from waiting: a signal it did not use is drained.
  void drain_wake_locked();
  void enqueue_async(std::unique_ptr<Request> request);
  /// With the lock held and no leader: writes and reads until `until` is answered (the
  /// completion thread: until nothing is queued or owed, or completions wait), then passes the
  /// role on. Each turn does one step, the first that applies: write every pipelined request
  /// queued (so new calls go out while earlier replies are on their way), read the replies of
  /// the oldest request written, run a request that runs alone once nothing is owed.
  void lead(std::unique_lock<std::mutex>& lock, const Request* until);
  /// The steps (without the lock; each returns the requests it answered).
  std::vector<Request*> write(std::vector<Request*>& batch);
  /// The commands of the merged requests of `batch`, built; those whose build threw leave the
  /// batch, failed with what it threw, and are returned.
  static std::vector<Request*> build_merged(std::vector<Request*>& batch);
  std::vector<Request*> read_oldest();
  std::vector<Request*> run_alone_now(Request& r);
  /// A connection lost (or left owing replies no one will read): every request written and not
  /// answered, and `also`, fail with `error`.
  std::vector<Request*> fail_owed(const std::exception_ptr& error, std::vector<Request*> also = {});
  void rerun(Request& r);
  /// With the lock held: `answered` are done (a merged one with its riders, each with its own
  /// outcome); their callers are told (or the completion thread).
  void answer(const std::vector<Request*>& answered, const Request* until);
  /// A merged request's outcome split: each of its items (its own and its riders') gets what
  /// the reply says of it, or what ended the command.
  static void split_merged(Request& r);
  /// With the lock held: no one leads now; the owner of the oldest request left (and the oldest
  /// synchronous caller, and the completion thread if an asynchronous request is left) is told.
  void pass_on();
  void completion_loop();
  /// With the lock held: starts the completion thread unless it runs.
  void start_completion_thread();

  Connection conn_;
  ScriptRunner scripts_;

  std::mutex mutex_;
  std::deque<Request*> queue_;      // not written yet (asynchronous ones are owned by the queues)
  std::deque<Request*> in_flight_;  // written, replies owed, in the order written (the leader's)
  std::vector<Request*> reruns_;    // answered "not run", sent again once nothing is owed (the leader's)
  std::vector<std::unique_ptr<Request>> completed_;  // answered asynchronous ones, for the completion thread
  std::size_t sync_waiting_ = 0;                     // synchronous requests not answered
  std::vector<std::shared_ptr<Waker>> to_wake_;      // callers to wake once the lock is left
  // Writes while a reply is awaited: the leader waits for its reply or for wake_fd_ (an
  // eventfd), which a synchronous caller signals once every caller the last answer woke is
  // queued again (returning_ of them are not), so their requests go out together at once
  // instead of after the reply (see wake_writer_locked).
  int wake_fd_ = -1;
  bool awaiting_ = false;  // the leader waits in Connection::await_reply
  bool woken_ = false;     // wake_fd_ was signalled and not drained
  std::size_t returning_ = 0;
  bool leading_ = false;
  bool stopping_ = false;
  std::condition_variable completion_wake_;
  std::thread completion_thread_;
};

}  // namespace streamq::detail
