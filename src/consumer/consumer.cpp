// SPDX-License-Identifier: MIT
// The Consumer facade: builds the parts, starts them, and stops them in the order written in
// shutdown(). The thread that calls run() does the set-up, waits for the stop, and drives
// the shutdown on its own connection (CLIENT UNBLOCK of the fetcher, release of unstarted
// entries). The parts:
//   fetcher     (thread)   own-PEL replay, XREADGROUP, group recovery          fetcher.hpp
//   executor    (threads)  decode, dispatch, retry policy                      executor.hpp
//   completer   (thread)   acks, retries, dead letters, orphan records         completer.hpp
//   duties      (thread)   lease keeper, reclaimer, janitor, pause watch        duties.hpp
//   cancels     (thread)   follows the pushed cancels of held entries          cancel_follower.hpp
//   in-flight set          the one lock, between all of them                   inflight.hpp
#include "streamq/consumer.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "cancel_follower.hpp"
#include "completer.hpp"
#include "duties.hpp"
#include "executor.hpp"
#include "fetcher.hpp"
#include "forwarder.hpp"
#include "janitor.hpp"
#include "lease_keeper.hpp"
#include "log.hpp"
#include "name_lock.hpp"
#include "options.hpp"
#include "pause_watch.hpp"
#include "process_pool.hpp"
#include "reclaimer.hpp"
#include "shared.hpp"
#include "streamq/errors.hpp"
#include "util/signals.hpp"
#include "watchdog.hpp"

namespace streamq {

using detail::Clock;
using detail::Millis;

namespace {

constexpr Millis kUnblockRetry{50};  // CLIENT UNBLOCK is resent while the fetcher lingers

/// The parts that run one partition of the queue (all of it, with one partition), declared in
/// the order they may use each other: each part outlives the ones that use it (the duties the
/// duty runner, the duty runner and the reclaimer the fetcher's callback).
struct Engine {
  explicit Engine(std::shared_ptr<detail::Shared> shared)
      : s(std::move(shared)),
        control(s->connection),
        completer(*s),
        executor(s),
        leases(*s),
        reclaimer(*s),
        janitor(*s),
        pause_watch(*s),
        duties(*s),
        forwarder(*s),
        forwarding(*s),
        cancels(*s),
        fetcher(*s, [this] {
          reclaimer.arm();
          duties.wake();
        }) {
    duties.add(pause_watch);
    duties.add(leases);
    duties.add(reclaimer);
    if (s->opt.idle_consumer_timeout.count() > 0) duties.add(janitor);
    forwarding.add(forwarder);
    s->wake_courier = [this] {
      forwarder.poke();
      forwarding.wake();
    };
  }

  void start() {
    s->watchdog->watch_entry_leases();  // a holder that cannot renew its entries stops their handlers
    completer.start();
    executor.start();
    duties.start();
    forwarding.start();
    cancels.start();
    fetcher.start();
  }

  std::shared_ptr<detail::Shared> s;
  detail::Connection control;  // the run() thread's: set-up and shutdown
  detail::Completer completer;
  detail::Executor executor;
  detail::LeaseKeeper leases;
  detail::Reclaimer reclaimer;
  detail::Janitor janitor;
  detail::PauseWatch pause_watch;
  detail::DutyRunner duties;
  detail::Forwarder forwarder;
  detail::DutyRunner forwarding;
  detail::CancelFollower cancels;
  detail::Fetcher fetcher;
};

/// The options of partition `i`: its stream, and its share of the handler threads and of the
/// prefetch (the first ones get the remainder).
ConsumerOptions partition_options(const ConsumerOptions& o, int i) {
  ConsumerOptions p = o;
  const int n = o.partitions;
  p.stream = detail::partition_stream(o.stream, n, i);
  p.partitions = 1;
  p.concurrency = o.concurrency / n + (i < o.concurrency % n ? 1 : 0);
  p.prefetch = std::max(p.concurrency, o.prefetch / n + (i < o.prefetch % n ? 1 : 0));
  return p;
}

/// Logs a warning when the server may evict keys under memory pressure: a queue's
/// stream, delayed set or dead letters could go. Quiet when the user may not run INFO (the
/// worker role of docs/operations.md; `streamq doctor` checks it as an administrator).
void warn_on_eviction(detail::Connection& conn) {
  const detail::Reply r = conn.command(detail::Argv{"INFO", "memory"});
  if (!r.view().is_string()) return;
  const std::string_view info = r.view().str();
  constexpr std::string_view field = "maxmemory_policy:";
  const std::size_t at = info.find(field);
  if (at == std::string_view::npos) return;
  const std::size_t from = at + field.size();
  const std::string_view policy = info.substr(from, info.find_first_of("\r\n", from) - from);
  if (policy == "noeviction") return;
  detail::log(LogLevel::warning,
              "redis " + conn.describe() + " has maxmemory-policy " + std::string(policy) +
                  ": under memory pressure it deletes keys, a queue's tasks included; set "
                  "maxmemory-policy noeviction (a full server then refuses enqueues with OOM)");
}

}  // namespace

struct Consumer::Impl {
  explicit Impl(ConsumerOptions o) {
    const ConsumerOptions opt = detail::validated(std::move(o));
    auto metrics = std::make_shared<detail::Metrics>();
    // Until the name lock chooses one (NameLock::claim), a consumer given no name goes by a
    // unique one, the same in every partition.
    const std::string first_name =
        opt.consumer_name.empty() ? detail::unique_consumer_name() : opt.consumer_name;
    if (!opt.consumer_name.empty()) name = opt.consumer_name;
    for (int i = 0; i < opt.partitions; ++i) {
      parts.push_back(
          std::make_shared<detail::Shared>(partition_options(opt, i), opt.stream, metrics, first_name));
      parts.back()->watchdog = std::make_shared<detail::Watchdog>(*parts.back());
    }
  }
  ~Impl() { request_stop(); }

  /// One per partition (one with a single partition); parts[0] holds the handlers registered.
  std::vector<std::shared_ptr<detail::Shared>> parts;
  bool started = false;  // run() was called (handlers are frozen)
  /// The process executor's fork server and children (start_pool).
  std::shared_ptr<detail::ProcessPool> pool;

  std::mutex mutex;
  std::condition_variable cv;
  bool stop_requested = false;
  /// Consumer::name(): the name given, or the one chosen at start ("" until then).
  std::string name;
  int signals_seen = 0;

  void request_stop() noexcept {
    {
      std::lock_guard lock(mutex);
      stop_requested = true;
    }
    cv.notify_all();
    for (const auto& s : parts) {
      s->stopping.request_stop();  // handlers can see it (Task::stop_requested)
      s->inflight.stop();          // no entry starts any more
    }
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
      for (const auto& s : parts) s->inflight.end_idle_wait();
    }
  }

  /// Every partition goes by the name partition 0's name lock took; before any of their
  /// threads start.
  void adopt_name(const std::string& chosen) {
    for (const auto& p : parts) p->consumer_name = chosen;
    std::lock_guard lock(mutex);
    name = chosen;
  }

  /// Connects and creates the groups of one partition, and takes the consumer name with
  /// `name_lock` (partition 0's); connection failures and passing server states are retried
  /// with backoff until stop(). False when stopped first.
  bool set_up(detail::Shared& s, detail::Connection& conn, detail::NameLock* name_lock) {
    detail::Backoff backoff(s.connection.backoff_base, s.connection.backoff_max);
    for (;;) {
      std::string problem;
      try {
        conn.connect();
        // The first partition's start looks at every partition before it creates anything.
        bool checked = true;
        if (name_lock != nullptr && parts.size() > 1) {
          for (const auto& other : parts) {
            checked = detail::ensure_only_group(conn, other->streams, s.opt.group, false) && checked;
          }
        }
        checked = detail::ensure_only_group(conn, s.streams, s.opt.group, true) && checked;
        if (!checked && name_lock != nullptr) {
          detail::log(LogLevel::warning, "the ACL user may not run XINFO GROUPS: not checked that group " +
                                             s.opt.group + " is the only one on " + s.queue +
                                             " (streamq runs one group per queue)");
        }
        detail::check_paused(s, conn);  // a consumer started on a paused queue reads nothing
        if (name_lock != nullptr) {
          name_lock->claim(conn);  // ConfigError when a live process has the name
          adopt_name(s.consumer_name);
          warn_on_eviction(conn);
        }
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

  /// The process executor's fork server, forked now from the calling thread (before any thread
  /// of streamq's), when a handler uses it.
  void start_pool() {
    if (pool) return;
    const auto& handlers = parts[0]->handlers;
    if (std::none_of(handlers.begin(), handlers.end(),
                     [](const auto& h) { return h.second.options.executor == HandlerExecutor::process; })) {
      return;
    }
    pool = std::make_shared<detail::ProcessPool>(handlers, static_cast<std::size_t>(concurrency()));
    for (const auto& s : parts) s->pool = pool;
  }

  /// No child starts any more; the fork server leaves once the children out are back.
  void close_pool() {
    if (pool) pool->close();
  }

  void run() {
    if (started) throw ConfigError("Consumer::run() can be called only once");
    started = true;
    {
      std::lock_guard lock(mutex);
      if (stop_requested) return;
    }
    start_pool();
    struct PoolCloser {
      Impl& impl;
      ~PoolCloser() { impl.close_pool(); }
    } const pool_closer{*this};
    // Every partition runs the handlers registered: the same objects, not copies of them (a
    // handler with state of its own keeps one state).
    if (parts.size() > 1) {
      const auto shared = [](detail::Handler& h) {
        if (!h) return;
        h = [f = std::make_shared<detail::Handler>(std::move(h))](const Task& t) { (*f)(t); };
      };
      for (auto& [type, registration] : parts[0]->handlers) {
        shared(registration.handler);
        if (registration.async) {
          registration.async = [f = std::make_shared<AsyncHandler>(std::move(registration.async))](
                                   const Task& t, AsyncDone done) { (*f)(t, std::move(done)); };
        }
      }
      shared(parts[0]->fallback);
      for (Middleware& m : parts[0]->middleware) {
        m = [f = std::make_shared<Middleware>(std::move(m))](const Task& t, const Next& next) {
          (*f)(t, next);
        };
      }
    }
    for (std::size_t i = 1; i < parts.size(); ++i) {
      parts[i]->handlers = parts[0]->handlers;
      parts[i]->fallback = parts[0]->fallback;
      parts[i]->middleware = parts[0]->middleware;
    }
    std::optional<detail::SignalRegistration> signals;
    if (parts[0]->opt.stop_on_signals) signals.emplace([this] { on_signal(); });
    // Declared before the engines: partition 0's duty runner renews it until it is stopped.
    detail::NameLock name_lock(*parts[0], [this] { request_stop(); });
    std::vector<std::unique_ptr<Engine>> engines;
    for (const auto& s : parts) {
      engines.push_back(std::make_unique<Engine>(s));
      bool ready = false;
      try {
        ready = set_up(*s, engines.back()->control, engines.size() == 1 ? &name_lock : nullptr);
      } catch (...) {
        name_lock.release(engines[0]->control);  // a later partition refused: the name is free again
        throw;
      }
      if (!ready) {
        name_lock.release(engines[0]->control);
        return;
      }
    }
    // First: after a stop (SIGSTOP) the name is checked before the leases are renewed.
    engines[0]->duties.add(name_lock, true);
    try {
      for (const auto& e : engines) e->start();
      const detail::Shared& s = *parts[0];
      detail::log(LogLevel::info,
                  "consumer " + s.consumer_name + " running on " +
                      (parts.size() == 1 ? s.keys().stream + " and its priority levels"
                                         : std::to_string(parts.size()) + " partitions of " + s.queue + " (" +
                                               s.keys().stream + " ...) and their priority levels") +
                      " (group " + s.opt.group + ", " + std::to_string(concurrency()) + " handler threads, " +
                      (s.opt.priority_weights.empty() ? "strict" : "weighted") + " order)");
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return stop_requested; });
    } catch (...) {
      // A thread that could not be started: stop the ones that were, in the same order.
      request_stop();
      shutdown(engines);
      name_lock.release(engines[0]->control);
      throw;
    }
    shutdown(engines);
    name_lock.release(engines[0]->control);
    if (name_lock.lost()) throw ConfigError(name_lock.lost_message());
  }

  int concurrency() const {
    int n = 0;
    for (const auto& s : parts) n += s->opt.concurrency;
    return n;
  }

  /// The stop order, each step for every partition before the next step. request_stop()
  /// already stopped handlers from taking entries.
  void shutdown(std::vector<std::unique_ptr<Engine>>& engines) {
    const auto grace_end = Clock::now() + parts[0]->opt.shutdown_grace;
    for (const auto& e : engines) e->forwarding.stop();  // it holds no entry: nothing to finish
    // 1. No more reads: wake each fetcher from its BLOCK now rather than after up to `block`.
    for (const auto& e : engines) e->fetcher.request_stop();
    for (const auto& e : engines) stop_reader(*e, e->fetcher);
    // 2. Running handlers get the grace period, their leases still renewed.
    for (const auto& e : engines) e->duties.shutting_down();
    for (const auto& e : engines) {
      if (!e->s->inflight.wait_idle(grace_end)) {
        detail::log(LogLevel::warning, "shutdown grace period over with handlers still running");
        break;
      }
    }
    // 3. No more pushed cancels nor renewals, then hand the unstarted entries back.
    for (const auto& e : engines) e->cancels.request_stop();
    for (const auto& e : engines) stop_reader(*e, e->cancels);
    for (const auto& e : engines) {
      e->duties.stop();
      try {
        e->control.recheck_master();  // idle since the start: after a failover, onto the new master
        detail::ScriptRunner scripts(e->control);
        detail::LeaseKeeper::release(*e->s, scripts);
      } catch (const std::exception& ex) {
        detail::log(LogLevel::warning, std::string("shutdown: ") + ex.what() +
                                           "; unstarted entries stay pending until reclaimed");
      }
    }
    // 4. Write every completion (retrying a passing refusal for a while).
    const auto& c = parts[0]->connection;
    const auto finish_by = std::max(grace_end, Clock::now() + c.connect_timeout + c.socket_timeout);
    // All at once: a slow master costs the other partitions nothing.
    for (const auto& e : engines) e->completer.request_finish(finish_by);
    for (const auto& e : engines) e->completer.join();
    // No task is given up from now on: what is not written stays pending.
    for (const auto& s : parts) s->watchdog->stop();
    // 5. Handlers still running keep their threads, detached; their entries stay pending.
    std::size_t running = 0;
    for (const auto& s : parts) running += s->inflight.running();
    if (running > 0) {
      detail::log(LogLevel::warning, std::to_string(running) +
                                         " handlers still running after shutdown_grace; their "
                                         "entries stay pending and are reclaimed after claim_min_idle");
    }
    for (const auto& e : engines) e->executor.release_threads();
  }

  /// Waits for a thread asked to stop that reads with BLOCK (the fetcher, the cancel follower)
  /// to leave its loop, unblocking its read meanwhile, then joins it.
  template <class Reader>
  static void stop_reader(Engine& e, Reader& reader) {
    while (!reader.wait_finished(kUnblockRetry)) unblock(e, reader.reader());
    reader.join();
  }

  /// CLIENT UNBLOCK of a blocked read on the reader's connection.
  static void unblock(Engine& e, const detail::BlockedReader& reader) {
    try {
      const std::int64_t id = reader.client_id();
      if (id < 0) return;
      const std::string where = reader.server();
      detail::Connection& control = e.control;
      if (!control.config().endpoint.is_sentinel() && !control.config().endpoint.is_cluster()) {
        control.command(detail::Argv{"CLIENT", "UNBLOCK"}.add(id));
        return;
      }
      // The id is the fetcher's only on the fetcher's server, which a failover (or a slot
      // move) may have made another than this connection's: sent there only (the fetcher's
      // BLOCK ends it otherwise).
      if (control.connected() && control.describe() != where) control.disconnect();
      if (!control.connected()) control.connect();
      if (control.describe() == where) control.command_here(detail::Argv{"CLIENT", "UNBLOCK"}.add(id));
    } catch (const std::exception&) {
      // Redis is unreachable: the fetcher's own read fails or times out instead.
    }
  }
};

Consumer::Consumer(ConsumerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Consumer::~Consumer() = default;
Consumer::Consumer(Consumer&&) noexcept = default;
Consumer& Consumer::operator=(Consumer&&) noexcept = default;

namespace {

/// Checks a registration of on() or on_async() before it is added.
void check_registration(bool started, const std::string& task_type, bool empty,
                        const HandlerOptions& options) {
  if (started) throw ConfigError("handlers must be registered before run()");
  if (task_type.empty()) throw ConfigError("task_type must not be empty");
  if (empty) throw ConfigError("handler for \"" + task_type + "\" is empty");
  detail::check_handler_options(options);
}

void add_registration(detail::Shared& s, std::string task_type, detail::Registration r) {
  if (r.options.max_in_flight > 0) r.running = std::make_shared<std::atomic<int>>(0);
  const auto [it, added] = s.handlers.emplace(std::move(task_type), std::move(r));
  if (!added) throw ConfigError("a handler for \"" + it->first + "\" is already registered");
}

}  // namespace

void Consumer::on(std::string task_type, Handler handler, HandlerOptions options) {
  check_registration(impl_->started, task_type, !handler, options);
  if (impl_->pool && options.executor == HandlerExecutor::process) {
    throw ConfigError("the process handler for \"" + task_type +
                      "\" must be registered before start_fork_server(): the fork server would not have it");
  }
  add_registration(*impl_->parts[0], std::move(task_type),
                   {.handler = std::move(handler), .options = options});
}

void Consumer::on_async(std::string task_type, AsyncHandler handler, HandlerOptions options) {
  check_registration(impl_->started, task_type, !handler, options);
  if (options.executor == HandlerExecutor::process) {
    throw ConfigError("the asynchronous handler for \"" + task_type +
                      "\" cannot use HandlerExecutor::process: it runs in this process, on the thread that "
                      "calls its done");
  }
  add_registration(*impl_->parts[0], std::move(task_type), {.async = std::move(handler), .options = options});
}

void Consumer::on_unknown(Handler handler) {
  if (impl_->started) throw ConfigError("handlers must be registered before run()");
  impl_->parts[0]->fallback = std::move(handler);
}

void Consumer::use(Middleware middleware) {
  if (impl_->started) throw ConfigError("middleware must be added before run()");
  if (!middleware) throw ConfigError("middleware must not be empty");
  impl_->parts[0]->middleware.push_back(std::move(middleware));
}

void Consumer::run() { impl_->run(); }
void Consumer::start_fork_server() {
  if (impl_->started) throw ConfigError("start_fork_server() must be called before run()");
  if (impl_->pool) throw ConfigError("start_fork_server() was called already");
  impl_->start_pool();
  if (!impl_->pool) throw ConfigError("start_fork_server(): no handler uses HandlerExecutor::process");
}
void Consumer::stop() noexcept { impl_->request_stop(); }
std::string Consumer::name() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->name;
}
ConsumerMetrics Consumer::metrics() const noexcept { return impl_->parts[0]->metrics.snapshot(); }

}  // namespace streamq
