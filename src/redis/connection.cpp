// SPDX-License-Identifier: MIT
#include "connection.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <thread>

#include "cluster_router.hpp"
#include "error_code.hpp"
#include "hiredis_compat.hpp"
#include "reply_arena.hpp"
#include "streamq/errors.hpp"
#include "tls.hpp"
#include "util/durations.hpp"
#include "util/owned_fds.hpp"

namespace streamq::detail {
namespace {

#if HIREDIS_MAJOR >= 1
// Link-time guard: hiredis 0.14 and 1.x differ in their ABI (redisReply's layout), and a
// streamq compiled against 1.x but linked with 0.14's library would enqueue fine and then
// crash on the first error reply. This reference to a function 0.14 does not have turns that
// mix into an undefined reference when linking. (The package config refuses it earlier.)
[[gnu::used]] redisContext* (*const requires_hiredis_1)(const redisOptions*) = &redisConnectWithOptions;
#endif

/// hiredis writes with plain write(); a write to a reset socket raises SIGPIPE, whose default
/// action kills the process. hiredis 0.14 cannot pass MSG_NOSIGNAL, so while we write we block
/// SIGPIPE on this thread and consume a SIGPIPE that our write raised before restoring the
/// caller's mask. Process-wide handlers are left alone. Threads streamq starts itself block
/// SIGPIPE for their whole life instead (block_sigpipe_for_this_thread), and skip all this.
thread_local bool t_sigpipe_blocked = false;

class SigpipeGuard {
 public:
  SigpipeGuard() noexcept {
    if (t_sigpipe_blocked) return;
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeGuard() {
    if (!blocked_) return;
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
  bool blocked_ = false;
};

constexpr std::size_t kReadBufferKeep = 1 << 20;  // read buffer kept across replies

timeval to_timeval(Millis ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

void block_sigpipe_for_this_thread() noexcept {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  // A SIGPIPE our writes raise then stays pending on this thread, never delivered; it goes
  // with the thread.
  t_sigpipe_blocked = pthread_sigmask(SIG_BLOCK, &pipe, nullptr) == 0;
}

Connection::Connection(ConnectionConfig config)
    : config_(std::move(config)), backoff_(config_.backoff_base, config_.backoff_max) {
  if (config_.endpoint.is_cluster()) {
    cluster_ = std::make_unique<ClusterRouter>(config_);
  }
}

Connection::~Connection() { disconnect(); }

bool Connection::connected() const noexcept { return cluster_ ? cluster_->connected() : ctx_ != nullptr; }

std::uint64_t Connection::generation() const noexcept {
  return cluster_ ? cluster_->generation() : generation_;
}

std::int64_t Connection::client_id() const noexcept {
  if (cluster_) return cluster_->client_id();
  return client_id_;
}

void Connection::for_each_master(const std::function<void(Connection&)>& visit) {
  if (!cluster_) {
    visit(*this);
    return;
  }
  cluster_->for_each_master(visit);
}

void Connection::disconnect() noexcept {
  if (cluster_) cluster_->drop();
  if (ctx_ != nullptr) {
    disown_fd(ctx_->fd);
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  owed_ = 0;
  demoted_ = false;
  ready_.reset();
}

void Connection::set_timeout(Millis timeout) {
  if (redisSetTimeout(ctx_, to_timeval(timeout)) != REDIS_OK) fail("setting the socket timeout");
}

std::string Connection::describe() const {
  const Endpoint& ep = config_.endpoint;
  if (cluster_) return cluster_->describe();
  if (!ep.is_sentinel()) return ep.describe();
  return "master " + ep.master_name +
         (master_.host.empty() ? " (not found yet)" : " at " + master_.describe());
}

void Connection::fail(const char* during) {
  const int saved_errno = errno;
  std::string message = "redis " + describe() + ": " + during;
  bool timeout = false;
  if (ctx_ != nullptr) {
    timeout = is_timeout(*ctx_, saved_errno);
    message += ": ";
    message += timeout ? "timed out" : (ctx_->errstr[0] != '\0' ? ctx_->errstr : "I/O error");
  }
  if (config_.tls) {
    if (const std::string tls = tls_failure_detail(); !tls.empty()) message += " (" + tls + ")";
  }
  disconnect();
  if (timeout) throw TimeoutError(message);
  throw ConnectionError(message);
}

void Connection::fail_timeout(const char* during) {
  const std::string message = "redis " + describe() + ": " + during + ": timed out";
  disconnect();
  throw TimeoutError(message);
}

void Connection::connect() {
  if (cluster_) {
    backoff_.fail();  // until a master's connection is set up
    cluster_->connect();
    backoff_.reset();
    return;
  }
  if (ctx_ != nullptr) return;
  const Endpoint& ep = config_.endpoint;
  const timeval tv = to_timeval(config_.connect_timeout);
  backoff_.fail();  // until the session is fully set up
  if (ep.is_sentinel()) {
    master_ = ask_sentinels(config_.connect_timeout);
    next_recheck_ = std::chrono::steady_clock::now() + kSentinelRecheck;
  }
  ctx_ = ep.is_unix()       ? redisConnectUnixWithTimeout(ep.unix_path.c_str(), tv)
         : ep.is_sentinel() ? redisConnectWithTimeout(master_.host.c_str(), master_.port, tv)
                            : redisConnectWithTimeout(ep.host.c_str(), ep.port, tv);
  if (ctx_ == nullptr) throw ConnectionError("redis " + describe() + ": cannot allocate a context");
  if (ctx_->err != 0) fail("connect");
  own_fd(ctx_->fd);  // close-on-exec, and closed by the process executor's fork server
  // The handshake is bounded by the connect timeout; commands by the socket timeout.
  set_timeout(config_.connect_timeout);
  if (config_.tls) {
    bool timed_out = false;
    std::string why;
    {
      SigpipeGuard guard;  // the handshake writes too
      why = start_tls(ctx_, *config_.tls, ep.host, timed_out);
    }
    if (!why.empty()) {
      disconnect();
      if (timed_out) throw TimeoutError("redis " + describe() + ": " + why);
      throw ConnectionError("redis " + describe() + ": " + why);
    }
  }
  if (!ep.is_unix()) redisEnableKeepAlive(ctx_);
  // hiredis frees its read buffer whenever it is empty and over 16 KiB, which a batch of 64
  // tasks is: every read then paid a large free and malloc (and glibc's consolidation).
  ctx_->reader->maxbuf = kReadBufferKeep;
  use_reply_arena(ctx_->reader);

  std::vector<Argv> hello;
  if (!ep.password.empty()) {
    hello.push_back(ep.user.empty() ? Argv{"AUTH", ep.password} : Argv{"AUTH", ep.user, ep.password});
  }
  if (ep.db != 0) {
    Argv select{"SELECT"};
    select.add(static_cast<std::int64_t>(ep.db));
    hello.push_back(std::move(select));
  }
  hello.push_back(Argv{"CLIENT", "SETNAME", config_.client_name});
  hello.push_back(Argv{"CLIENT", "ID"});
  // A sentinel may still name a master that has just been turned into a replica (or one
  // that came back as a replica after a failover it missed).
  if (ep.is_sentinel()) hello.push_back(Argv{"ROLE"});
  std::vector<Reply> replies;
  try {
    replies = pipeline(hello);
  } catch (const TimeoutError&) {
    throw;
  } catch (const ConnectionError& e) {
    if (ep.is_unix()) throw;
    if (!config_.tls) {
      // A TLS port closes a plain-text connection at its first command (or answers it with a
      // TLS alert, which is no RESP).
      throw ConnectionError(std::string(e.what()) +
                            " (if this port serves TLS only, the URL must be rediss://)");
    }
    // With TLS 1.3 the client's handshake ends before the server checks the client's
    // certificate: a server that wants one and got none ends the connection at the first
    // reply (with an alert, or a reset when the alert was not read).
    if (!ep.tls_options.cert_file.empty()) throw;
    throw ConnectionError(std::string(e.what()) +
                          " (if the server wants a client certificate, tls-auth-clients yes: set "
                          "connection.tls.cert_file and key_file)");
  }
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const ReplyView v = replies[i].view();
    if (v.is_error()) {
      std::string text(v.error());
      disconnect();
      if (ep.is_sentinel() && i + 1 == replies.size() && text.starts_with("NOPERM")) {
        text += " (a redis+sentinel:// URL checks the master's ROLE: the user needs +role)";
      }
      throw ReplyError(text);  // WRONGPASS, NOPERM, ...: a configuration problem, not I/O
    }
  }
  if (ep.is_sentinel()) {
    const ReplyView role = replies.back().view();
    const std::string_view name =
        role.is_array() && role.size() > 0 && role[0].is_string() ? role[0].str() : "";
    if (name != "master") {
      disconnect();
      throw ConnectionError("redis " + describe() + ": the sentinels name a server whose ROLE is " +
                            (name.empty() ? std::string("unknown") : std::string(name)) +
                            ", not master (a failover is not finished yet)");
    }
    replies.pop_back();
  }
  client_id_ = replies.back().view().integer();
  set_timeout(config_.socket_timeout);
  backoff_.reset();
  generation_ += 1;
}

void Connection::connect_with_backoff() {
  recheck_master();  // before the caller builds its commands for this connection
  if (ctx_ != nullptr) return;
  const Millis delay = backoff_delay();
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  connect();
}

Reply Connection::command(const Argv& argv) {
  if (cluster_) return cluster_->command(argv, reconnect_on_use_);
  append(argv);
  return next_reply("command");
}

Reply Connection::command_here(const Argv& argv) {
  if (cluster_) return cluster_->command_here(argv);
  if (ctx_ == nullptr) {
    throw ConnectionError("redis " + describe() + ": the connection that sent the previous command is gone");
  }
  format_command(argv, out_);
  if (redisAppendFormattedCommand(ctx_, out_.data(), out_.size()) != REDIS_OK) fail("command");
  ++owed_;
  return next_reply("command");
}

std::vector<Reply> Connection::wait_where_sent(const Argv& wait,
                                               const std::vector<std::string>& written_keys) {
  if (!cluster_) {
    std::vector<Reply> one;
    one.push_back(command_here(wait));
    return one;
  }
  return cluster_->wait_where_sent(wait, written_keys);
}

void Connection::append(const Argv& argv) {
  if (cluster_) return cluster_->append(argv, reconnect_on_use_);
  // Between commands (nothing owed), a sentinel URL's connection asks now and then whether the
  // master is still this one: a master demoted by a failover can stay a writable master for
  // seconds before the sentinels reconfigure it, and nothing tells its clients.
  if (reconnect_on_use_) {
    // A caller may have built this command for the connection it saw (EVALSHA of a script the
    // server knows): one that the recheck just dropped is not silently replaced under it.
    if (recheck_master()) {
      throw ConnectionError("redis " + describe() + ": the sentinels name another master now (" +
                            "a failover); nothing was sent, the next call connects to it");
    }
    if (ctx_ == nullptr) connect();
  } else if (ctx_ == nullptr) {
    throw ConnectionError("redis " + describe() + ": not connected (the server stopped being the master)");
  }
  format_command(argv, out_);
  if (redisAppendFormattedCommand(ctx_, out_.data(), out_.size()) != REDIS_OK) fail("pipeline");
  ++owed_;
}

void Connection::flush() {
  if (cluster_) return cluster_->flush();
  // (An empty output buffer is an empty string: hiredis keeps it NUL-terminated.)
  if (ctx_ == nullptr || ctx_->obuf == nullptr || ctx_->obuf[0] == '\0') return;
  SigpipeGuard guard;
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) fail("pipeline write");
  }
}

Reply Connection::read_reply() { return cluster_ ? cluster_->read_reply() : next_reply("pipeline"); }

void Connection::write_queued(const char* during) {
  // Under the SIGPIPE guard, only when something is queued: a read cannot raise SIGPIPE, and
  // the guard costs four system calls.
  if (ctx_->obuf == nullptr || ctx_->obuf[0] == '\0') return;
  SigpipeGuard guard;
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) fail(during);
  }
}

bool Connection::await_reply(int wake_fd) {
  if (cluster_) return true;
  if (ready_) return true;
  const char* during = "pipeline";
  if (ctx_ == nullptr) fail(during);
  void* raw = nullptr;
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail(during);
  if (raw == nullptr) write_queued(during);
  const auto deadline = std::chrono::steady_clock::now() + config_.socket_timeout;
  while (raw == nullptr) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) fail_timeout(during);
    pollfd fds[2] = {{ctx_->fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
    if (n < 0 && errno != EINTR) fail(during);
    if (n <= 0) continue;
    if (fds[0].revents != 0) {  // (an error or a hang-up too: the read says which)
      if (redisBufferRead(ctx_) != REDIS_OK || redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail(during);
    } else if (fds[1].revents != 0) {
      return false;
    }
  }
  ready_.emplace(static_cast<redisReply*>(raw), free_arena_reply);
  return true;
}

Reply Connection::receive(const char* during) {
  void* raw = nullptr;
  // A reply that an earlier read brought along needs no I/O, nor the SIGPIPE guard's four
  // syscalls (a pipeline's replies mostly come many to a read).
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail(during);
  if (raw == nullptr) {
    write_queued(during);  // what append() queued goes first, then the reply is read
    while (raw == nullptr) {
      if (redisBufferRead(ctx_) != REDIS_OK || redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail(during);
    }
  }
  return Reply(static_cast<redisReply*>(raw), free_arena_reply);
}

Reply Connection::next_reply(const char* during) {
  if (ctx_ == nullptr) fail(during);
  Reply reply = ready_ ? std::move(*ready_) : receive(during);
  ready_.reset();
  if (owed_ > 0) --owed_;
  if (config_.endpoint.is_sentinel()) {
    const ReplyView v = reply.view();
    if (v.is_error() && is_demotion_error(v.error())) demoted_ = true;
    if (demoted_ && owed_ == 0) disconnect();  // the next command asks the sentinels again
  }
  return reply;
}

std::vector<Reply> Connection::pipeline(const std::vector<Argv>& commands) {
  for (const Argv& argv : commands) append(argv);
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) replies.push_back(read_reply());
  return replies;
}

}  // namespace streamq::detail
