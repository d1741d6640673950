// SPDX-License-Identifier: MIT
#include "connection.hpp"

#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <thread>

#include "cluster.hpp"
#include "cluster_connection.hpp"
#include "error_code.hpp"
#include "hiredis_compat.hpp"
#include "reply_arena.hpp"
#include "streamq/errors.hpp"
#include "tls.hpp"
#include "util/durations.hpp"

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

bool is_demotion_error(std::string_view error) noexcept {
  const std::string_view code = error_code(error);
  return code == "READONLY" ||
         (code == "UNBLOCKED" && error.find("instance state changed") != std::string_view::npos) ||
         (code == "ERR" && error.find("WAIT cannot be used with replica") != std::string_view::npos);
}

void block_sigpipe_for_this_thread() noexcept {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  // A SIGPIPE our writes raise then stays pending on this thread, never delivered; it goes
  // with the thread.
  t_sigpipe_blocked = pthread_sigmask(SIG_BLOCK, &pipe, nullptr) == 0;
}

void check_cluster_stream(std::string_view stream, std::string_view field) {
  if (has_hash_tag(stream)) return;
  const std::string s(stream);
  throw ConfigError(std::string(field) + " \"" + s +
                    "\" cannot be used on Redis Cluster: the queue's keys (" + s + ":dlq, " + s +
                    ":delayed, ...) must share the stream's slot, so the name needs a hash tag, e.g. \"{" +
                    s + "}\" (a script may only touch keys of one slot)");
}

namespace {

/// The TLS context of a rediss:// URL, from the URL's tls_* settings and options.tls (the same
/// setting in both with different values is a ConfigError); null for any other URL, where a
/// TLS setting is a ConfigError.
std::shared_ptr<const TlsContext> tls_config(Endpoint& ep, const TlsOptions& options) {
  TlsOptions merged = ep.tls_options;
  const std::pair<std::string TlsOptions::*, const char*> texts[] = {
      {&TlsOptions::ca_file, "ca_file"},
      {&TlsOptions::ca_dir, "ca_dir"},
      {&TlsOptions::cert_file, "cert_file"},
      {&TlsOptions::key_file, "key_file"},
      {&TlsOptions::server_name, "server_name"}};
  bool any = !options.verify;
  for (const auto& [field, name] : texts) {
    const std::string& given = options.*field;
    if (given.empty()) continue;
    any = true;
    std::string& from_url = merged.*field;
    if (!from_url.empty() && from_url != given) {
      throw ConfigError(std::string("connection.tls.") + name + " and the URL's tls_" + name +
                        " differ: give it once");
    }
    from_url = given;
  }
  merged.verify = ep.tls_options.verify && options.verify;
  if (!ep.tls) {
    if (!any) return nullptr;
    if (ep.is_cluster() || ep.is_sentinel() || ep.is_unix()) {
      throw ConfigError("connection.tls is set, but TLS is supported with one server (rediss://) only");
    }
    throw ConfigError("connection.tls is set, but connection.url is not a rediss:// URL");
  }
  ep.tls_options = merged;
  return make_tls_context(merged);
}

}  // namespace

ConnectionConfig make_connection_config(const ConnectionOptions& options, std::string_view role,
                                        std::string_view stream) {
  ConnectionConfig c;
  c.endpoint = parse_url(options.url);
  c.tls = tls_config(c.endpoint, options.tls);
  if (c.endpoint.is_cluster() && !stream.empty()) check_cluster_stream(stream, "stream");
  c.route_key = std::string(stream);
  check_duration(options.connect_timeout, Millis(1), "connection.connect_timeout");
  check_duration(options.socket_timeout, Millis(1), "connection.socket_timeout");
  check_duration(options.backoff_base, Millis(1), "connection.backoff_base");
  check_duration(options.backoff_max, Millis(0), "connection.backoff_max");
  // 0 = the role's default: a Producer's or StatsReader's caller waits for the reconnect; a
  // Consumer has nobody waiting, and a wrong host should not be hammered.
  const Millis backoff_max =
      options.backoff_max.count() != 0
          ? options.backoff_max
          : std::max(options.backoff_base, role == "consumer" ? kConsumerBackoffMax : kCallerBackoffMax);
  if (backoff_max < options.backoff_base) {
    throw ConfigError("connection.backoff_max must be 0 (the default) or >= connection.backoff_base");
  }
  c.connect_timeout = options.connect_timeout;
  c.socket_timeout = options.socket_timeout;
  c.backoff_base = options.backoff_base;
  c.backoff_max = backoff_max;
  c.client_name = options.client_name.empty() ? "streamq-" + std::string(role) : options.client_name;
  if (std::any_of(c.client_name.begin(), c.client_name.end(),
                  [](unsigned char ch) { return ch <= ' ' || ch >= 127; })) {
    throw ConfigError("connection.client_name must be printable ASCII without spaces");
  }
  return c;
}

Backoff::Backoff(Millis base, Millis max) : base_(base), max_(max), rng_(std::random_device{}()) {}

Millis Backoff::delay() {
  if (failures_ == 0) return Millis{0};
  // base * 2^failures, saturating at max (no shift overflow however many failures).
  std::int64_t cap = base_.count();
  for (int i = 0; i < failures_ && cap < max_.count(); ++i) cap *= 2;
  cap = std::min<std::int64_t>(cap, max_.count());
  std::uniform_int_distribution<std::int64_t> dist(0, cap);
  return Millis{dist(rng_)};
}

Connection::Connection(ConnectionConfig config)
    : config_(std::move(config)), backoff_(config_.backoff_base, config_.backoff_max) {
  if (config_.endpoint.is_cluster()) {
    cluster_ = std::make_unique<ClusterState>();
    if (!config_.route_key.empty()) cluster_->route_slot = key_slot(config_.route_key);
  }
}

Connection::~Connection() { disconnect(); }

bool Connection::connected() const noexcept { return cluster_ ? cluster_connected() : ctx_ != nullptr; }

std::int64_t Connection::client_id() const noexcept {
  if (cluster_) return cluster_->home != nullptr ? cluster_->home->client_id() : -1;
  return client_id_;
}

void Connection::for_each_master(const std::function<void(Connection&)>& visit) {
  if (!cluster_) {
    visit(*this);
    return;
  }
  cluster_guarded([&] {
    if (cluster_->owed.empty()) cluster_refresh();
    const std::vector<HostPort> masters = cluster_->map.masters;
    for (const HostPort& m : masters) {
      Connection& link = cluster_link(m);
      cluster_ensure(link);
      visit(link);
    }
    return 0;
  });
}

void Connection::disconnect() noexcept {
  if (cluster_) cluster_drop();
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  owed_ = 0;
  demoted_ = false;
}

HostPort Connection::ask_sentinels(Millis budget) {
  const Endpoint& ep = config_.endpoint;
  // One budget for the whole question, however many sentinels are down; each sentinel gets its
  // share of what is left, so a host that swallows packets cannot take all of it.
  const auto deadline = std::chrono::steady_clock::now() + budget;
  std::string problems;
  std::string refusal;  // the first error reply of a sentinel
  std::size_t unknown = 0;
  std::size_t asked = 0;
  for (std::size_t k = 0; k < ep.sentinels.size(); ++k) {
    const std::size_t i = (sentinel_first_ + k) % ep.sentinels.size();
    const HostPort& at = ep.sentinels[i];
    const auto note = [&](std::string_view why) {
      problems += (problems.empty() ? "" : "; ") + at.describe() + ": " + std::string(why);
    };
    const auto remaining = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    const Millis left{remaining.count() / static_cast<std::int64_t>(ep.sentinels.size() - k)};
    if (left.count() <= 0) {
      note("not asked (connect_timeout spent)");
      continue;
    }
    // The connection to the sentinel that answered last is kept for the next question.
    if (sentinel_ == nullptr || i != sentinel_first_) {
      ConnectionConfig sc = config_;
      sc.endpoint = Endpoint{};
      sc.endpoint.host = at.host;
      sc.endpoint.port = at.port;
      sc.endpoint.user = ep.sentinel_user;
      sc.endpoint.password = ep.sentinel_password;
      sentinel_ = std::make_unique<Connection>(std::move(sc));
    }
    sentinel_->config_.connect_timeout = left;
    sentinel_->config_.socket_timeout = left;  // this answer is part of connecting
    ++asked;
    try {
      if (sentinel_->connected()) sentinel_->set_timeout(left);
      const Reply r = sentinel_->command(Argv{"SENTINEL", "get-master-addr-by-name", ep.master_name});
      const ReplyView v = r.view();
      if (v.is_error()) {
        if (refusal.empty()) refusal = std::string(v.error()) + " (from sentinel " + at.describe() + ")";
        note(v.error());
      } else if (v.is_nil() || (v.is_array() && v.size() == 0)) {
        ++unknown;
        note("monitors no master named " + ep.master_name);
      } else if (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) {
        const std::string_view port = v[1].str();
        int number = 0;
        const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
        if (ec == std::errc() && end == port.data() + port.size() && number > 0 && number <= 65535) {
          sentinel_first_ = i;
          return HostPort{std::string(v[0].str()), number};
        }
        note("answered a port that is not a number");
      } else {
        note("answered SENTINEL get-master-addr-by-name with an unexpected reply");
      }
    } catch (const ReplyError& e) {  // AUTH refused
      if (refusal.empty()) refusal = std::string(e.what()) + " (from sentinel " + at.describe() + ")";
      note(e.what());
    } catch (const ConnectionError& e) {
      note(e.what());
    }
    sentinel_.reset();  // not kept: this sentinel did not answer
  }
  // Nobody answered: the next question starts with the next sentinel, not the silent one.
  sentinel_first_ = (sentinel_first_ + 1) % ep.sentinels.size();
  sentinel_.reset();
  if (!refusal.empty()) throw ReplyError(refusal);
  if (asked == ep.sentinels.size() && unknown == asked) {
    throw ConfigError("connection.url: no sentinel monitors a master named " + ep.master_name + " (" +
                      problems + ")");
  }
  throw ConnectionError("redis " + ep.describe() + ": no sentinel named the master: " + problems);
}

bool Connection::recheck_master() {
  if (ctx_ == nullptr || owed_ > 0 || !config_.endpoint.is_sentinel()) return false;
  if (std::chrono::steady_clock::now() < next_recheck_) return false;
  HostPort named;
  try {
    named = ask_sentinels(std::min(config_.connect_timeout, kSentinelRecheckBudget));
  } catch (const std::exception&) {
    // The sentinels cannot say now: keep the master this connection has, and ask less often.
    next_recheck_ = std::chrono::steady_clock::now() + kSentinelRecheckAfterFailure;
    return false;
  }
  next_recheck_ = std::chrono::steady_clock::now() + kSentinelRecheck;
  if (named == master_) return false;
  disconnect();  // a failover happened: connect() asks again and goes to the new master
  return true;
}

void Connection::set_timeout(Millis timeout) {
  if (redisSetTimeout(ctx_, to_timeval(timeout)) != REDIS_OK) fail("setting the socket timeout");
}

std::string Connection::describe() const {
  const Endpoint& ep = config_.endpoint;
  if (cluster_)
    return cluster_->home != nullptr ? "cluster node " + cluster_->home->describe() : ep.describe();
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

void Connection::connect() {
  if (cluster_) return cluster_connect();
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

void format_command(const Argv& argv, std::string& out) {
  // RESP: *<argc>\r\n then $<len>\r\n<bytes>\r\n per argument. hiredis' own formatter runs a
  // format-string parser for every argument; this is the same bytes without it.
  out.clear();
  char num[24];
  auto put_count = [&](char prefix, std::size_t n) {
    out.push_back(prefix);
    const auto [end, ec] = std::to_chars(num, num + sizeof num, n);
    out.append(num, end);
    out.append("\r\n", 2);
  };
  put_count('*', argv.size());
  for (std::size_t i = 0; i < argv.size(); ++i) {
    put_count('$', argv.lengths()[i]);
    out.append(argv.data()[i], argv.lengths()[i]);
    out.append("\r\n", 2);
  }
}

Reply Connection::command(const Argv& argv) {
  if (cluster_) return cluster_command(argv);
  append(argv);
  return next_reply("command");
}

Reply Connection::command_here(const Argv& argv) {
  if (cluster_) {
    if (cluster_->home == nullptr) {
      throw ConnectionError("redis " + describe() +
                            ": the connection that sent the previous command is gone");
    }
    return cluster_guarded([&] { return cluster_->home->command_here(argv); });
  }
  if (ctx_ == nullptr) {
    throw ConnectionError("redis " + describe() + ": the connection that sent the previous command is gone");
  }
  format_command(argv, out_);
  if (redisAppendFormattedCommand(ctx_, out_.data(), out_.size()) != REDIS_OK) fail("command");
  ++owed_;
  return next_reply("command");
}

std::vector<Reply> Connection::wait_where_sent(const Argv& wait) {
  if (!cluster_) {
    std::vector<Reply> one;
    one.push_back(command_here(wait));
    return one;
  }
  return cluster_guarded([&] {
    std::vector<Connection*> sent = std::move(cluster_->sent_since_wait);
    cluster_->sent_since_wait.clear();
    for (Connection* link : sent) {
      if (!link->connected()) {
        throw ConnectionError("redis " + link->describe() +
                              ": the connection that sent the previous command is gone");
      }
    }
    for (Connection* link : sent) link->append(wait);
    for (Connection* link : sent) link->flush();
    std::vector<Reply> replies;
    for (Connection* link : sent) replies.push_back(link->read_reply());
    return replies;
  });
}

void Connection::append(const Argv& argv) {
  if (cluster_) return cluster_append(argv);
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
  if (cluster_) return cluster_flush();
  if (ctx_ == nullptr) return;
  SigpipeGuard guard;
  int done = 0;
  while (!done) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) fail("pipeline write");
  }
}

Reply Connection::read_reply() { return cluster_ ? cluster_read_reply() : next_reply("pipeline"); }

Reply Connection::next_reply(const char* during) {
  if (ctx_ == nullptr) fail(during);
  void* raw = nullptr;
  // A reply that an earlier read brought along needs no I/O, nor the SIGPIPE guard's four
  // syscalls (a pipeline's replies mostly come many to a read).
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) fail(during);
  if (raw == nullptr) {
    SigpipeGuard guard;  // redisGetReply writes whatever is still queued first
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) fail(during);
  }
  Reply reply(static_cast<redisReply*>(raw), free_arena_reply);
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
