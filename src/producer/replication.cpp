// SPDX-License-Identifier: MIT
// With ProducerOptions::min_replicas_acked: WAIT for the replicas to acknowledge what was
// written, and what they acknowledged, for a ReplicationError or a refused batch's message.
#include <algorithm>

#include "producer_impl.hpp"
#include "streamq/errors.hpp"

namespace streamq {

detail::Argv Producer::Impl::wait_argv() const {
  detail::Argv wait{"WAIT"};
  wait.add(static_cast<std::int64_t>(options.min_replicas_acked));
  wait.add(static_cast<std::int64_t>(options.replicas_ack_timeout.count()));
  return wait;
}

namespace {

/// The WAIT, alone on the shared connection: it follows every write before it there (other
/// callers' included), so it covers the caller's, unless the connection that wrote them was
/// lost since (`written_on`: its generation then): a new one has written nothing to wait for.
/// `keys`: a key of each slot the caller wrote (with a cluster URL, their masters are asked).
std::vector<detail::Reply> wait_on(detail::Connection& conn, const detail::Argv& wait,
                                   std::uint64_t written_on, const std::vector<std::string>& keys) {
  if (conn.generation() != written_on) {
    throw ConnectionError("redis " + conn.describe() +
                          ": the connection that wrote the tasks was lost before WAIT could ask the "
                          "replicas; they may not have them");
  }
  return conn.wait_where_sent(wait, keys);
}

}  // namespace

std::int64_t Producer::Impl::replicas_acknowledging(std::uint64_t written_on,
                                                    const std::vector<std::string>& keys) {
  const detail::Argv wait = wait_argv();
  std::vector<detail::Reply> replies;
  link.run_alone([&](detail::Connection& conn, detail::ScriptRunner&) {
    replies = wait_on(conn, wait, written_on, keys);
  });
  return fewest_acknowledging(replies);
}

void Producer::Impl::replicas_then(std::vector<std::string> ids, std::uint64_t written_on,
                                   const std::string& key, std::function<void(std::exception_ptr)> then) {
  auto queued = std::make_shared<QueuedWait>();
  const auto add_key = [&key](QueuedWait& w) {
    if (std::find(w.keys.begin(), w.keys.end(), key) == w.keys.end()) w.keys.push_back(key);
  };
  {
    std::lock_guard lock(wait_mutex);
    if (next_wait && next_wait->written_on == written_on) {
      // Sent after this caller's write was answered, on the connection that wrote it: covers it.
      add_key(*next_wait);
      next_wait->callers.emplace_back(std::move(ids), std::move(then));
      return;
    }
    queued->written_on = written_on;
    add_key(*queued);
    queued->callers.emplace_back(std::move(ids), std::move(then));
    next_wait = queued;
  }
  auto wait = std::make_shared<detail::Argv>(wait_argv());
  auto replies = std::make_shared<std::vector<detail::Reply>>();
  auto answer = [this, queued, replies](const detail::SharedOutcome& o) {
    {
      std::lock_guard lock(wait_mutex);  // (not sent at all: no later call may join it now)
      if (next_wait == queued) next_wait.reset();
    }
    std::exception_ptr failed = o.error;
    std::int64_t acked = 0;
    if (!failed) {
      try {
        acked = fewest_acknowledging(*replies);
      } catch (...) {  // the WAIT refused (an error reply): so is each caller's
        failed = std::current_exception();
      }
    }
    for (auto& [caller_ids, caller_then] : queued->callers) {
      std::exception_ptr error = failed;
      if (!error) {
        try {
          check_replicas(caller_ids, acked);
        } catch (...) {
          error = std::current_exception();
        }
      }
      // Taken out, so nothing here holds the caller's completion (a promise, say) or its error
      // once it ran: the caller that gets them is their last owner, as for a WAIT of its own.
      auto then = std::move(caller_then);
      caller_then = nullptr;
      try {
        then(std::move(error));
      } catch (...) {  // a completion must not throw; one that does loses only its own answer
      }
    }
  };
  try {
    link.submit_alone(
        [this, queued, wait, replies](detail::Connection& conn, detail::ScriptRunner&) {
          {
            std::lock_guard lock(wait_mutex);  // sent now: later calls queue a WAIT of their own
            if (next_wait == queued) next_wait.reset();
          }
          // (No caller joins it from here on: its keys are read without the lock.)
          *replies = wait_on(conn, *wait, queued->written_on, queued->keys);
        },
        std::move(answer));
  } catch (...) {  // not queued (bad_alloc): each caller gets the error, those that joined too
    {
      std::lock_guard lock(wait_mutex);
      if (next_wait == queued) next_wait.reset();
    }
    const std::exception_ptr error = std::current_exception();
    for (auto& caller : queued->callers) {
      try {
        link.post([then = std::move(caller.second)](const detail::SharedOutcome& o) { then(o.error); },
                  {{}, error});
      } catch (...) {  // (nothing left to answer it with: as a completion that threw)
      }
    }
  }
}

std::int64_t Producer::Impl::fewest_acknowledging(const std::vector<detail::Reply>& replies) const {
  // No reply: with a cluster URL, no master was written to since the connections were set up
  // again (the write's own connection was lost): counted as no acknowledgement, never as all.
  if (replies.empty()) return 0;
  std::int64_t fewest = options.min_replicas_acked;
  const detail::Endpoint& endpoint = link.config().endpoint;
  for (const detail::Reply& reply : replies) {
    if (reply.view().is_error() && (endpoint.is_sentinel() || endpoint.is_cluster()) &&
        detail::is_demotion_error(reply.view().error())) {
      return 0;
    }
    fewest = std::min(fewest, reply.view().check().integer());
  }
  return fewest;
}

std::string Producer::Impl::replication_of_written(const std::vector<std::string>& ids,
                                                   std::uint64_t written_on,
                                                   const std::vector<std::string>& keys) {
  if (options.min_replicas_acked == 0 ||
      std::all_of(ids.begin(), ids.end(), [](const auto& id) { return id.empty(); })) {
    return {};
  }
  const std::int64_t acked = replicas_acknowledging(written_on, keys);
  return "; the tasks written were acknowledged by " + std::to_string(acked) + " of the " +
         std::to_string(options.min_replicas_acked) + " replicas asked for" +
         (acked < options.min_replicas_acked ? " (lost if the master fails now)" : "");
}

void Producer::Impl::wait_for_replicas(const std::vector<std::string>& ids, std::uint64_t written_on,
                                       const std::vector<std::string>& keys) {
  if (options.min_replicas_acked == 0) return;
  check_replicas(ids, replicas_acknowledging(written_on, keys));
}

void Producer::Impl::check_replicas(const std::vector<std::string>& ids, std::int64_t acked) const {
  if (acked >= options.min_replicas_acked) return;
  throw ReplicationError(
      std::to_string(ids.size()) + (ids.size() == 1 ? " task (" + ids[0] + ")" : " tasks") +
          " written to the master of " + options.stream + ", but only " + std::to_string(acked) + " of the " +
          std::to_string(options.min_replicas_acked) + " replicas asked for acknowledged within " +
          std::to_string(options.replicas_ack_timeout.count()) +
          " ms: queued, and lost only if the master fails before a replica copies them",
      ids, acked, options.min_replicas_acked);
}

}  // namespace streamq
