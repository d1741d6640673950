// SPDX-License-Identifier: MIT
#include "completer.hpp"

#include <algorithm>

#include "log.hpp"
#include "redis/error_code.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {
namespace {

constexpr Millis kRetryMax{2000};  // longest wait before a refused write is tried again

}  // namespace

bool acks_in_multi(const Shared& s) {
  return Clock::now().time_since_epoch().count() >=
         s.acks_without_multi_until.load(std::memory_order_relaxed);
}

AckSpan append_acks(std::vector<Argv>& argvs, const Shared& s, std::uint16_t stream,
                    const std::vector<std::string_view>& ids, const OrphanAcks& orphans,
                    const std::vector<const UniqueLock*>& locks, bool transaction) {
  const QueueKeys& keys = s.keys(stream);
  const std::size_t first = argvs.size();
  if (transaction) argvs.push_back(Argv{"MULTI"});
  if (!ids.empty()) {
    Argv ack{"XACK", keys.stream, s.opt.group};
    Argv del{"XDEL", keys.stream};
    for (std::string_view id : ids) {
      ack.add(id);
      del.add(id);
    }
    argvs.push_back(std::move(ack));
    argvs.push_back(std::move(del));
  }
  if (!orphans.records.empty()) {
    Argv del{"XDEL", keys.dlq};
    Argv unnote{"DEL"};
    for (std::string_view id : orphans.records) del.add(id);
    for (std::string_view id : orphans.entries) unnote.add_copy(orphan_key(keys.stream, id));
    argvs.push_back(std::move(del));
    argvs.push_back(std::move(unnote));
  }
  if (!locks.empty()) {
    Argv release{"EVAL", script_source(ScriptId::release)};
    release.add(static_cast<std::int64_t>(locks.size()));
    for (const UniqueLock* l : locks) release.add(l->key);
    for (const UniqueLock* l : locks) release.add(l->holder);
    argvs.push_back(std::move(release));
  }
  if (transaction) argvs.push_back(Argv{"EXEC"});
  return {first, argvs.size() - 1, transaction};
}

bool exec_refused(const std::vector<Reply>& replies, const AckSpan& block) {
  const ReplyView v = replies[block.last].view();
  return block.transaction && v.is_error() && !v.error().starts_with("EXECABORT");
}

void note_acks(Shared& s, const AckSpan& block, const std::string& error) {
  if (error_code(error) == "OOM") {
    // Plain acknowledgements for a second; then a MULTI tries again.
    s.acks_without_multi_until.store((Clock::now() + std::chrono::seconds(1)).time_since_epoch().count());
    if (!s.acks_oom_logged.exchange(true)) {
      log(LogLevel::warning, "the server is out of memory (" + error +
                                 "): acknowledging without MULTI, which it refuses, until it has room");
    }
  } else if (error.empty() && block.transaction && s.acks_oom_logged.exchange(false)) {
    log(LogLevel::info, "the server has room again: acknowledging in MULTI");
  }
}

std::string acks_error(const std::vector<Reply>& replies, const AckSpan& block) {
  const std::size_t multi = block.first, exec = block.last;
  for (std::size_t i = multi; i <= exec; ++i) {
    if (replies[i].view().is_error()) {
      const std::string_view e = replies[i].view().error();
      // EXECABORT only says that an earlier queued command was refused: report that one.
      if (!e.starts_with("EXECABORT")) return std::string(e);
    }
  }
  return replies[exec].view().is_error() ? std::string(replies[exec].view().error()) : std::string();
}

Completer::Completer(Shared& shared) : s_(shared), conn_(shared.connection), scripts_(conn_) {}

Completer::~Completer() { finish(Clock::now()); }

void Completer::start() {
  thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
}

void Completer::finish(Clock::time_point deadline) {
  request_finish(deadline);
  join();
}

void Completer::request_finish(Clock::time_point deadline) {
  if (!thread_.joinable()) return;
  deadline_.store(deadline.time_since_epoch().count());
  s_.inflight.stop_completer();
}

void Completer::join() {
  if (thread_.joinable()) thread_.join();
}

void Completer::main(const std::stop_token&) {
  block_sigpipe_for_this_thread();  // library code only runs on this thread
  std::vector<Completion> batch;
  InFlight::Writes more;  // start marks and reports
  Backoff retry_backoff(s_.connection.backoff_base, std::min(kRetryMax, s_.connection.backoff_max));
  Clock::time_point retry_at{};
  for (;;) {
    const Clock::time_point deadline{Clock::duration(deadline_.load())};
    const bool idle = batch.empty() && more.empty();
    const bool going =
        s_.inflight.wait_completions(batch, more, idle ? deadline : std::min(retry_at, deadline));
    const auto now = Clock::now();
    if (!going && batch.empty() && more.empty()) break;  // finish() was called and everything is written
    if (now >= deadline) {
      if (!batch.empty()) {
        log(LogLevel::warning, std::to_string(batch.size()) +
                                   " completions could not be written before the shutdown deadline; their "
                                   "entries stay pending and are reclaimed after claim_min_idle");
      }
      if (!more.empty()) {
        log(LogLevel::warning, std::to_string(more.marks.size()) + " start marks and " +
                                   std::to_string(more.reports.size()) +
                                   " tasks' reports could not be written before the shutdown deadline");
      }
      break;
    }
    if ((batch.empty() && more.empty()) || now < retry_at) continue;
    try {
      if (!conn_.connected()) {
        conn_.connect();
        count_reconnect(conn_, s_.metrics);
      }
      flush(batch, more);
    } catch (const ConnectionError& e) {
      // What was in flight may or may not have been written; every write is safe to repeat.
      const Millis delay = conn_.backoff_delay();
      log(LogLevel::warning,
          std::string("completer: ") + e.what() + "; retrying in " + std::to_string(delay.count()) + " ms");
      retry_at = now + delay;
      continue;
    } catch (const std::exception& e) {
      // The session set-up was refused (a busy or loading server, or an ACL problem).
      retry_backoff.fail();
      const Millis delay = retry_backoff.delay();
      log(LogLevel::warning,
          std::string("completer: ") + e.what() + "; retrying in " + std::to_string(delay.count()) + " ms");
      retry_at = now + delay;
      continue;
    }
    if (batch.empty() && more.empty()) {
      retry_backoff.reset();
    } else {
      retry_backoff.fail();
      retry_at = now + retry_backoff.delay();
    }
  }
}

}  // namespace streamq::detail
