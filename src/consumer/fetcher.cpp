// SPDX-License-Identifier: MIT
#include "fetcher.hpp"

#include "completer.hpp"
#include "log.hpp"
#include "pending.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {

void ensure_group(Connection& conn, const std::string& stream, const std::string& group) {
  const Reply r = conn.command(Argv{"XGROUP", "CREATE", stream, group, "0", "MKSTREAM"});
  if (r.view().is_error() && !r.view().error().starts_with("BUSYGROUP")) r.view().check();
}

Fetcher::Fetcher(Shared& shared, std::function<void()> on_first_replay)
    : s_(shared),
      on_first_replay_(std::move(on_first_replay)),
      conn_(shared.connection),
      scripts_(conn_),
      block_text_(std::to_string(shared.opt.block.count())) {}

Fetcher::~Fetcher() {
  request_stop();
  join();
}

void Fetcher::start() {
  thread_ = std::jthread([this](std::stop_token stop) { main(stop); });
}

void Fetcher::request_stop() noexcept { thread_.request_stop(); }

void Fetcher::join() {
  if (thread_.joinable()) thread_.join();
}

bool Fetcher::pause(const std::stop_token& stop, Millis delay) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  return !cv.wait_for(lock, stop, delay, [] { return false; }) && !stop.stop_requested();
}

void Fetcher::replay_own(const std::stop_token& stop) {
  std::string cursor = "0-0";
  while (!stop.stop_requested()) {
    PendingBatch batch = fetch_pending(s_, scripts_, PendingMode::own, cursor, 100);
    if (const std::size_t n = s_.inflight.deliver(batch.works); n > 0) {
      Metrics::add(s_.metrics.replayed, n);
      log(LogLevel::info,
          "replaying " + std::to_string(n) + " pending entries of consumer " + s_.opt.consumer_name);
    }
    if (batch.cursor == "0-0") break;
    cursor = std::move(batch.cursor);
  }
  if (!replayed_once_.exchange(true)) on_first_replay_();
}

bool Fetcher::read() {
  // Successes go out ahead of the read, in the same write, so one round trip acknowledges a
  // batch and fetches the next (the completer writes them when this thread is blocked).
  acks_.clear();
  const std::size_t count = s_.inflight.take_acks(acks_);
  std::vector<Argv> argvs;
  std::pair<std::size_t, std::size_t> block{0, 0};
  if (!acks_.empty()) {
    std::vector<std::string_view> ids;
    ids.reserve(acks_.size());
    for (const EntryKey& k : acks_) ids.push_back(k.id);  // stream 0: the only one read today
    block = append_acks(argvs, s_, 0, ids, {});
  }
  if (count > 0) {
    Argv read{"XREADGROUP", "GROUP", s_.opt.group, s_.opt.consumer_name, "COUNT"};
    read.add(static_cast<std::int64_t>(count)).add("BLOCK").add(block_text_);
    read.add("STREAMS").add(s_.keys().stream).add(">");
    argvs.push_back(std::move(read));
  }
  try {
    for (const Argv& argv : argvs) conn_.append(argv);
    conn_.flush();
    if (!acks_.empty()) {
      std::vector<Reply> replies;
      for (std::size_t i = 0; i <= block.second; ++i) replies.push_back(conn_.read_reply());
      acked(acks_error(replies, block.first, block.second));
      if (exec_refused(replies, block.second)) {
        conn_.disconnect();  // not left inside a MULTI; the read is lost with it, and redone
        return false;
      }
    }
  } catch (const ConnectionError&) {
    s_.inflight.acks_refused(acks_);  // written or not: the completer writes them (again)
    throw;
  }
  if (count == 0) return true;
  const Reply reply = conn_.read_reply();
  const ReplyView r = reply.view();
  if (r.is_error()) {
    const std::string_view err = r.error();
    if (!err.starts_with("NOGROUP") && !err.starts_with("UNBLOCKED")) r.check();
    // The stream or the group was deleted: recreate at 0 so nothing added afterwards is
    // skipped. This is data loss someone caused; say so.
    log(LogLevel::warning, "consumer group " + s_.opt.group + " on " + s_.keys().stream + " is gone (" +
                               std::string(err) + "); recreating it");
    ensure_group(conn_, s_.keys().stream, s_.opt.group);
    return false;
  }
  if (r.is_nil()) return true;  // BLOCK ran out, or CLIENT UNBLOCK at shutdown
  const ReplyView entries = r[0][1];
  works_.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) works_.push_back(read_entry(entries[i], 0, 1, Origin::fresh));
  s_.inflight.deliver(works_);
  return true;
}

void Fetcher::acked(const std::string& error) {
  if (error.empty()) {
    Metrics::add(s_.metrics.done, acks_.size());
    s_.inflight.acks_written(acks_);
  } else if (is_transient_error(error)) {
    s_.inflight.acks_refused(acks_);  // the completer retries them with backoff
  } else {
    log(LogLevel::error, "acknowledging " + std::to_string(acks_.size()) + " completed entries: " + error +
                             "; they stay pending and will be reclaimed after claim_min_idle");
    s_.inflight.acks_written(acks_);
  }
  acks_.clear();
}

void Fetcher::main(const std::stop_token& stop) {
  block_sigpipe_for_this_thread();  // library code only runs on this thread
  std::uint64_t replayed_generation = 0;
  Backoff error_backoff(s_.connection.backoff_base, s_.connection.backoff_max);
  while (!stop.stop_requested()) {
    try {
      if (!conn_.connected()) {
        conn_.connect();
        count_reconnect(conn_, s_.metrics);
        client_id_.store(conn_.client_id());
      }
      if (conn_.generation() != replayed_generation) {
        replay_own(stop);
        replayed_generation = conn_.generation();
      }
      if (!s_.inflight.wait_for_room(stop)) break;
      if (read()) {
        error_backoff.reset();
      } else {
        error_backoff.fail();
        if (!pause(stop, error_backoff.delay())) break;
      }
    } catch (const ConnectionError& e) {
      if (stop.stop_requested()) break;
      const Millis delay = conn_.backoff_delay();
      log(LogLevel::warning, std::string("fetcher: ") + e.what() + "; reconnecting in " +
                                 std::to_string(delay.count()) + " ms");
      if (!pause(stop, delay)) break;
    } catch (const std::exception& e) {
      // Server-side trouble (LOADING after a restart, NOPERM, a failing script): back off
      // rather than spin, and keep going.
      error_backoff.fail();
      const Millis delay = error_backoff.delay();
      log(retry_level(e), std::string("fetcher: ") + e.what() + "; retrying in " + std::to_string(delay.count()) +
                              " ms");
      if (!pause(stop, delay)) break;
    }
  }
  {
    std::lock_guard lock(finished_mutex_);
    finished_ = true;
  }
  finished_cv_.notify_all();
}

bool Fetcher::wait_finished(Millis timeout) {
  std::unique_lock lock(finished_mutex_);
  return finished_cv_.wait_for(lock, timeout, [&] { return finished_; });
}

}  // namespace streamq::detail
