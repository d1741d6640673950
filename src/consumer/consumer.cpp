// SPDX-License-Identifier: MIT
// The Consumer facade: builds the parts, starts them, and stops them in the order written in
// shutdown(). The thread that calls run() does the set-up, waits for the stop, and drives
// the shutdown on its own connection (CLIENT UNBLOCK of the fetcher, release of unstarted
// entries). The parts:
//   fetcher     (thread)   own-PEL replay, XREADGROUP, group recovery          fetcher.hpp
//   executor    (threads)  decode, dispatch, retry policy                      executor.hpp
//   completer   (thread)   acks, retries, dead letters, orphan records         completer.hpp
//   scheduler   (thread)   lease keeper, reclaimer, janitor, pause watch        scheduler.hpp
//   in-flight set          the one lock, between all of them                   inflight.hpp
#include "streamq/consumer.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "completer.hpp"
#include "executor.hpp"
#include "fetcher.hpp"
#include "forwarder.hpp"
#include "janitor.hpp"
#include "lease_keeper.hpp"
#include "log.hpp"
#include "options.hpp"
#include "pause_watch.hpp"
#include "reclaimer.hpp"
#include "scheduler.hpp"
#include "shared.hpp"
#include "signals.hpp"
#include "streamq/errors.hpp"

namespace streamq {

using detail::Clock;
using detail::Millis;

namespace {

constexpr Millis kUnblockRetry{50};  // CLIENT UNBLOCK is resent while the fetcher lingers

}  // namespace

struct Consumer::Impl {
  explicit Impl(ConsumerOptions o) : s(std::make_shared<detail::Shared>(detail::validated(std::move(o)))) {}
  ~Impl() { request_stop(); }

  std::shared_ptr<detail::Shared> s;
  bool started = false;  // run() was called (handlers are frozen)

  std::mutex mutex;
  std::condition_variable cv;
  bool stop_requested = false;
  int signals_seen = 0;

  void request_stop() noexcept {
    {
      std::lock_guard lock(mutex);
      stop_requested = true;
    }
    cv.notify_all();
    s->stopping.request_stop();  // handlers can see it (Task::stop_requested)
    s->inflight.stop();          // no entry starts any more
  }

  /// First signal: a graceful stop. Second: the grace period ends at once.
  void on_signal() noexcept {
    int seen;
    {
      std::lock_guard lock(mutex);
      seen = ++signals_seen;
    }
    if (seen == 1) {
      detail::log(LogLevel::info, "stop signal: finishing running tasks (a second signal stops at once)");
      request_stop();
    } else {
      detail::log(LogLevel::warning, "second stop signal: not waiting for running handlers");
      s->inflight.end_idle_wait();
    }
  }

  /// Connects and creates the group; connection failures and passing server states are
  /// retried with backoff until stop(). False when stopped first.
  bool set_up(detail::Connection& conn) {
    detail::Backoff backoff(s->connection.backoff_base, s->connection.backoff_max);
    for (;;) {
      std::string problem;
      try {
        conn.connect();
        for (const detail::QueueKeys& level : s->streams)
          detail::ensure_group(conn, level.stream, s->opt.group);
        detail::check_paused(*s, conn);  // a consumer started on a paused queue reads nothing
        return true;
      } catch (const ConnectionError& e) {
        problem = e.what();
      } catch (const ReplyError& e) {
        // A loading, full or failing-over server gets better; a wrong password does not.
        if (!detail::is_transient_error(e.what())) throw;
        problem = e.what();
      }
      backoff.fail();
      const Millis delay = backoff.delay();
      detail::log(LogLevel::warning,
                  "start: " + problem + "; retrying in " + std::to_string(delay.count()) + " ms");
      std::unique_lock lock(mutex);
      if (cv.wait_for(lock, delay, [&] { return stop_requested; })) return false;
    }
  }

  void run() {
    if (started) throw ConfigError("Consumer::run() can be called only once");
    started = true;
    {
      std::lock_guard lock(mutex);
      if (stop_requested) return;
    }
    std::optional<detail::SignalRegistration> signals;
    if (s->opt.stop_on_signals) signals.emplace([this] { on_signal(); });
    detail::Connection control(s->connection);
    if (!set_up(control)) return;

    // Declared in the order they may use each other: each part outlives the ones that use it
    // (the duties the scheduler, the scheduler and the reclaimer the fetcher's callback).
    detail::Completer completer(*s);
    detail::Executor executor(s);
    detail::LeaseKeeper leases(*s);
    detail::Reclaimer reclaimer(*s);
    detail::Janitor janitor(*s);
    detail::PauseWatch pause_watch(*s);
    detail::Scheduler scheduler(*s);
    scheduler.add(pause_watch);
    scheduler.add(leases);
    scheduler.add(reclaimer);
    if (s->opt.idle_consumer_timeout.count() > 0) scheduler.add(janitor);
    detail::Forwarder forwarder(*s);
    detail::Scheduler forwarding(*s);
    forwarding.add(forwarder);
    detail::Fetcher fetcher(*s, [&] {
      reclaimer.arm();
      scheduler.wake();
    });
    try {
      completer.start();
      executor.start();
      scheduler.start();
      forwarding.start();
      fetcher.start();
      detail::log(LogLevel::info, "consumer " + s->opt.consumer_name + " running on " + s->keys().stream +
                                      " and its priority levels (group " + s->opt.group + ", " +
                                      std::to_string(s->opt.concurrency) + " handler threads, " +
                                      (s->opt.priority_weights.empty() ? "strict" : "weighted") + " order)");
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return stop_requested; });
    } catch (...) {
      // A thread that could not be started: stop the ones that were, in the same order.
      request_stop();
      forwarding.stop();
      shutdown(control, fetcher, scheduler, completer, executor);
      throw;
    }
    forwarding.stop();  // it holds no entry: nothing to finish
    shutdown(control, fetcher, scheduler, completer, executor);
  }

  /// The stop order. request_stop() already stopped handlers from taking entries.
  void shutdown(detail::Connection& control, detail::Fetcher& fetcher, detail::Scheduler& scheduler,
                detail::Completer& completer, detail::Executor& executor) {
    const auto grace_end = Clock::now() + s->opt.shutdown_grace;
    // 1. No more reads: wake the fetcher from its BLOCK now rather than after up to `block`.
    fetcher.request_stop();
    while (!fetcher.wait_finished(kUnblockRetry)) {
      try {
        if (const std::int64_t id = fetcher.client_id(); id >= 0) {
          if (!control.config().endpoint.is_sentinel()) {
            control.command(detail::Argv{"CLIENT", "UNBLOCK"}.add(id));
          } else {
            // The id is the fetcher's only on the fetcher's server, which a failover may have
            // made another than this connection's: sent there only (the fetcher's BLOCK ends it
            // otherwise).
            const std::string where = fetcher.server();
            if (control.connected() && control.describe() != where) control.disconnect();
            if (!control.connected()) control.connect();
            if (control.describe() == where) control.command_here(detail::Argv{"CLIENT", "UNBLOCK"}.add(id));
          }
        }
      } catch (const std::exception&) {
        // Redis is unreachable: the fetcher's own read fails or times out instead.
      }
    }
    fetcher.join();
    // 2. Running handlers get the grace period, their leases still renewed.
    scheduler.shutting_down();
    if (!s->inflight.wait_idle(grace_end)) {
      detail::log(LogLevel::warning, "shutdown grace period over with handlers still running");
    }
    // 3. No more renewals, then hand the unstarted entries back.
    scheduler.stop();
    try {
      control.recheck_master();  // idle since the start: after a failover, onto the new master
      detail::ScriptRunner scripts(control);
      detail::LeaseKeeper::release(*s, scripts);
    } catch (const std::exception& e) {
      detail::log(LogLevel::warning,
                  std::string("shutdown: ") + e.what() + "; unstarted entries stay pending until reclaimed");
    }
    // 4. Write every completion (retrying a passing refusal for a while).
    const auto& c = s->connection;
    completer.finish(std::max(grace_end, Clock::now() + c.connect_timeout + c.socket_timeout));
    // 5. Handlers still running keep their threads, detached; their entries stay pending.
    if (const std::size_t n = s->inflight.running(); n > 0) {
      detail::log(LogLevel::warning, std::to_string(n) +
                                         " handlers still running after shutdown_grace; their "
                                         "entries stay pending and are reclaimed after claim_min_idle");
    }
    executor.release_threads();
  }
};

Consumer::Consumer(ConsumerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Consumer::~Consumer() = default;
Consumer::Consumer(Consumer&&) noexcept = default;
Consumer& Consumer::operator=(Consumer&&) noexcept = default;

void Consumer::on(std::string task_type, Handler handler, HandlerOptions options) {
  if (impl_->started) throw ConfigError("handlers must be registered before run()");
  if (task_type.empty()) throw ConfigError("task_type must not be empty");
  if (!handler) throw ConfigError("handler for \"" + task_type + "\" is empty");
  detail::check_handler_options(options);
  const auto [it, added] = impl_->s->handlers.emplace(
      std::move(task_type), detail::Registration{std::move(handler), std::move(options)});
  if (!added) throw ConfigError("a handler for \"" + it->first + "\" is already registered");
}

void Consumer::on_unknown(Handler handler) {
  if (impl_->started) throw ConfigError("handlers must be registered before run()");
  impl_->s->fallback = std::move(handler);
}

void Consumer::run() { impl_->run(); }
void Consumer::stop() noexcept { impl_->request_stop(); }
const std::string& Consumer::name() const noexcept { return impl_->s->opt.consumer_name; }
ConsumerMetrics Consumer::metrics() const noexcept { return impl_->s->metrics.snapshot(); }

}  // namespace streamq
