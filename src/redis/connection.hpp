// SPDX-License-Identifier: MIT
// One Redis connection: RAII owner of a redisContext, argv-only commands and pipelines,
// session set-up on every connect, typed errors, reconnect backoff with full jitter.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "reply.hpp"
#include "streamq/options.hpp"
#include "url.hpp"

struct redisContext;

namespace streamq::detail {

struct ClusterState;
class TlsContext;

using Millis = std::chrono::milliseconds;

/// Validated connection settings.
struct ConnectionConfig {
  Endpoint endpoint;
  Millis connect_timeout{2000};
  Millis socket_timeout{5000};
  std::string client_name;
  Millis backoff_base{50};
  Millis backoff_max{2000};
  /// With a redis+cluster:// URL: a key of the queue this connection serves (its stream). The
  /// master of its slot is the one connect() connects to, and where commands without keys go
  /// until a command with keys went elsewhere. Empty: the first master of the slot map.
  std::string route_key;
  /// Set for rediss:// URLs: every connect runs a TLS handshake with it.
  std::shared_ptr<const TlsContext> tls;
};

/// Defaults of ConnectionOptions::backoff_max (0): where a caller waits, and for a Consumer.
inline constexpr Millis kCallerBackoffMax{2000};
inline constexpr Millis kConsumerBackoffMax{30000};

/// For threads streamq starts: blocks SIGPIPE on the calling thread for good, so its writes
/// need no per-call signal mask changes (three system calls per command otherwise).
void block_sigpipe_for_this_thread() noexcept;

/// Validates ConnectionOptions; `role` ("producer", "consumer", "stats", ...) names the default
/// client name ("streamq-<role>") and picks the default backoff cap; `stream` is the queue the
/// connection serves (the route_key), "" for one that serves many. Throws ConfigError naming
/// the field, also when a redis+cluster:// URL is given with a stream whose keys would not
/// share its slot (no hash tag).
ConnectionConfig make_connection_config(const ConnectionOptions& options, std::string_view role,
                                        std::string_view stream = {});

/// ConfigError unless every key derived from `stream` (`<stream>:dlq`, `<stream>:delayed`, ...)
/// is in the stream's slot: on Redis Cluster a script may only touch keys of one slot. `field`
/// names the option in the message.
void check_cluster_stream(std::string_view stream, std::string_view field);

/// The arguments of one command. Views are stored as is (the caller keeps the bytes alive
/// until the command is sent); numbers and other temporaries are copied into owned storage.
class Argv {
 public:
  Argv() = default;
  Argv(Argv&&) noexcept = default;
  Argv& operator=(Argv&&) noexcept = default;
  Argv(const Argv&) = delete;
  Argv& operator=(const Argv&) = delete;
  Argv(std::initializer_list<std::string_view> args) {
    for (auto a : args) add(a);
  }
  Argv& add(std::string_view arg) {
    ptrs_.push_back(arg.data());
    lens_.push_back(arg.size());
    return *this;
  }
  /// Copies `arg` into storage owned by this Argv.
  Argv& add_copy(std::string arg) {
    owned_.push_back(std::make_unique<std::string>(std::move(arg)));
    return add(*owned_.back());
  }
  Argv& add(std::int64_t number) { return add_copy(std::to_string(number)); }
  /// Replaces argument `i` (a view, as add()).
  void set(std::size_t i, std::string_view arg) {
    ptrs_[i] = arg.data();
    lens_[i] = arg.size();
  }
  void clear() {
    ptrs_.clear();
    lens_.clear();
    owned_.clear();
  }
  std::size_t size() const noexcept { return ptrs_.size(); }
  std::string_view operator[](std::size_t i) const noexcept { return {ptrs_[i], lens_[i]}; }
  const char* const* data() const noexcept { return ptrs_.data(); }
  const std::size_t* lengths() const noexcept { return lens_.data(); }

 private:
  std::vector<const char*> ptrs_;
  std::vector<std::size_t> lens_;
  // Each owned string lives in its own allocation, so neither growing this vector nor moving
  // the Argv (into a std::vector<Argv>, say) moves the bytes ptrs_ points at.
  std::vector<std::unique_ptr<std::string>> owned_;
};

/// Exponential backoff with full jitter: after n consecutive failures the next attempt waits
/// a uniformly random time in [0, min(max, base * 2^n)]; 0 when nothing failed.
class Backoff {
 public:
  Backoff(Millis base, Millis max);
  void fail() noexcept { ++failures_; }
  void reset() noexcept { failures_ = 0; }
  int failures() const noexcept { return failures_; }
  Millis delay();

 private:
  Millis base_;
  Millis max_;
  int failures_ = 0;
  std::minstd_rand rng_;
};

/// One connection. Not thread-safe: one thread at a time.
///
/// After any I/O error or timeout the context is dropped (hiredis contexts cannot be reused
/// after an error) and the call throws ConnectionError/TimeoutError; the next call connects
/// again. Server error replies do not drop the connection and are returned as replies.
///
/// With a redis+sentinel:// URL every connect asks the sentinels for the master's address
/// (the one that answered last first), connects there and checks with ROLE that it is a
/// master. A READONLY or UNBLOCKED reply (the server was turned into a replica) is returned
/// as a reply, and the connection is dropped once the replies owed before it are read, so
/// the next command connects to the master the sentinels name then.
///
/// With a redis+cluster:// URL it routes: each command goes to the master serving the slot of
/// its first key (see command_slot), a command without keys to the master the last one went
/// to. Each master has a connection of its own, replies come back in the order the commands
/// were appended, and a MULTI goes to the master of the command after it. A MOVED reply updates
/// the slot map at once and has the whole map read again once nothing is owed; a single
/// command() follows MOVED and ASK itself and retries TRYAGAIN, a pipelined command's
/// redirection is returned to the caller as its reply (a passing state: nothing was done).
class Connection {
 public:
  explicit Connection(ConnectionConfig config);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Connects now if not connected (no waiting). Throws ConnectionError/TimeoutError, or
  /// ReplyError when the server refuses the session set-up (WRONGPASS, NOPERM, ...).
  void connect();
  /// As connect(), but first sleeps the backoff delay when the previous attempt failed.
  /// For callers that have nothing else to wait on (Producer, StatsReader), at the start of an
  /// operation: with a sentinel URL it is where a due recheck moves to a new master.
  void connect_with_backoff();
  bool connected() const noexcept;
  void disconnect() noexcept;

  /// Sends one command and reads its reply (connecting first if needed).
  Reply command(const Argv& argv);
  /// As command(), but only on the connection there is now: no reconnect and no sentinel
  /// recheck before it (a WAIT must follow its write on the same connection). Throws
  /// ConnectionError when not connected.
  Reply command_here(const Argv& argv);
  /// Sends `wait` (a WAIT command) on every connection that carried a command since the last
  /// call: this one, or with a cluster URL each master's that did (including a master an ASK
  /// sent a command to), pipelined so that they wait at the same time; their replies, in no
  /// particular order. Like command_here(), it never reconnects: ConnectionError when such a
  /// connection is gone. No reply may be owed when it is called.
  std::vector<Reply> wait_where_sent(const Argv& wait);
  /// Sends all commands in one write and reads their replies in order.
  std::vector<Reply> pipeline(const std::vector<Argv>& commands);

  /// Streaming pipeline, for callers that build commands while earlier ones are on the wire:
  /// append() queues a command (connecting first if needed), flush() writes everything
  /// queued so the server can start on it, read_reply() returns the next reply in order.
  void append(const Argv& argv);
  void flush();
  Reply read_reply();

  /// Off: a call on a dropped connection throws ConnectionError instead of connecting, and
  /// append() does no sentinel recheck (the caller calls recheck_master() where a new
  /// connection is safe). For a caller whose state belongs to one connection (the fetcher:
  /// its replies in flight, its replay of its own pending entries after each connect). With a
  /// cluster URL a command for a master whose connection is down throws the same way; reading
  /// the slot map again may still connect to a node, only to ask it.
  void set_reconnect_on_use(bool on) noexcept { reconnect_on_use_ = on; }
  /// Sentinel mode, connected and nothing owed: at most every kSentinelRecheck, asks the
  /// sentinels again and disconnects when they name another master (true then). No-op
  /// otherwise. connect_with_backoff() calls it first; append() too, and then throws
  /// ConnectionError (nothing sent) rather than send a command built for the old connection.
  bool recheck_master();

  /// Randomised delay before the next connect attempt (0 after a success).
  Millis backoff_delay() { return backoff_.delay(); }
  /// Consecutive failed connects (0 once connected).
  int failures() const noexcept { return backoff_.failures(); }
  /// Incremented by every successful connect; lets callers notice a reconnect. With a cluster
  /// URL: by a connect to the route key's master, and when connect() moves to another master
  /// for it (without a route key: by any master's connect).
  std::uint64_t generation() const noexcept { return generation_; }
  /// CLIENT ID of the current connection (with a cluster URL: of the master commands without
  /// keys go to).
  std::int64_t client_id() const noexcept;
  const ConnectionConfig& config() const noexcept { return config_; }
  /// With a cluster URL: calls `visit(node)` with a connection to every master of the slot map
  /// (read again first), for commands that each master answers for its own keys (SCAN, INFO).
  /// Without one: `visit(*this)`. Throws what connecting to a master throws.
  void for_each_master(const std::function<void(Connection&)>& visit);
  /// Where this connection goes or went: the URL's address, with a sentinel URL the master's
  /// name and the address the sentinels gave for it, with a cluster URL the master it used
  /// last (for messages, and to tell which server a CLIENT ID belongs to).
  std::string describe() const;

 private:
  /// Sentinel mode: the master's address from the first sentinel that knows it, all of them
  /// within `budget`. Throws ConnectionError when none answers, ReplyError when a
  /// sentinel refused (AUTH) and none answered, ConfigError when every sentinel answered and
  /// none knows the master's name.
  HostPort ask_sentinels(Millis budget);
  [[noreturn]] void fail(const char* during);
  void set_timeout(Millis timeout);
  Reply next_reply(const char* during);

  // Cluster mode (src/cluster_connection.cpp).
  void cluster_connect();
  bool cluster_connected() const noexcept;
  void cluster_refresh();
  Connection& cluster_link(const HostPort& node);
  Connection& cluster_link_for(int slot);
  void cluster_ensure(Connection& link);
  void cluster_append(const Argv& argv);
  void cluster_flush();
  Reply cluster_read_reply();
  Reply cluster_command(const Argv& argv);
  void cluster_drop() noexcept;
  template <class F>
  auto cluster_guarded(F&& f) -> decltype(f());

  ConnectionConfig config_;
  redisContext* ctx_ = nullptr;
  Backoff backoff_;
  std::uint64_t generation_ = 0;
  std::int64_t client_id_ = -1;
  std::string out_;  // the command being formatted, reused
  // Sentinel mode: the master the sentinels named at the last connect, the sentinel that
  // answered then, replies still owed on this connection, and whether a reply said that the
  // server is no longer the master (drop the connection once nothing is owed).
  HostPort master_;
  std::size_t sentinel_first_ = 0;
  std::unique_ptr<Connection> sentinel_;  // to sentinels[sentinel_first_], kept between questions
  std::chrono::steady_clock::time_point next_recheck_{};
  std::size_t owed_ = 0;
  bool demoted_ = false;
  bool reconnect_on_use_ = true;
  std::unique_ptr<ClusterState> cluster_;  // set with a redis+cluster:// URL
};

/// How often a sentinel URL's connection asks the sentinels whether its master is still the
/// master (when it is used; an idle connection asks nothing).
inline constexpr Millis kSentinelRecheck{1000};
/// A recheck's question is bounded by this (or connect_timeout if shorter); after a recheck
/// that no sentinel answered, the next one waits kSentinelRecheckAfterFailure.
inline constexpr Millis kSentinelRecheckBudget{500};
inline constexpr Millis kSentinelRecheckAfterFailure{5000};

/// True for a reply saying that the server has stopped being the master: READONLY (also inside
/// a script's error on Redis 6.2), a blocked read ended because the instance turned replica
/// (UNBLOCKED ... instance state changed), or a WAIT sent to a replica.
bool is_demotion_error(std::string_view error) noexcept;

/// The RESP encoding of one command (what redisAppendFormattedCommand takes); `out` is reused.
void format_command(const Argv& argv, std::string& out);

}  // namespace streamq::detail
