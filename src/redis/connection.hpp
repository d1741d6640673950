// SPDX-License-Identifier: MIT
// One Redis connection: RAII owner of a redisContext, argv-only commands and pipelines,
// session set-up on every connect, typed errors, reconnect backoff with full jitter.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "argv.hpp"
#include "backoff.hpp"
#include "connection_config.hpp"
#include "reply.hpp"
#include "url.hpp"

struct redisContext;

namespace streamq::detail {

class ClusterRouter;

/// For threads streamq starts: blocks SIGPIPE on the calling thread for good, so its writes
/// need no per-call signal mask changes (three system calls per command otherwise).
void block_sigpipe_for_this_thread() noexcept;

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
  /// sent a command to), and each master's that serves one of `written_keys` (the keys the
  /// caller wrote: on a connection shared by threads, another caller's WAIT may have covered
  /// them since; a key whose master carried nothing since the connections were set up, or no
  /// key with nothing carried since the last call, asks every master that carried a command
  /// since then). Pipelined so that they wait at the same time; their replies, in no particular
  /// order. Like command_here(), it never reconnects: ConnectionError when such a connection is
  /// gone. No reply may be owed when it is called.
  std::vector<Reply> wait_where_sent(const Argv& wait, const std::vector<std::string>& written_keys = {});
  /// Sends all commands in one write and reads their replies in order.
  std::vector<Reply> pipeline(const std::vector<Argv>& commands);

  /// Streaming pipeline, for callers that build commands while earlier ones are on the wire:
  /// append() queues a command (connecting first if needed), flush() writes everything
  /// queued so the server can start on it, read_reply() returns the next reply in order.
  void append(const Argv& argv);
  void flush();
  Reply read_reply();
  /// Writes what append() queued, then waits until the next reply has arrived (true: read_reply()
  /// returns it without waiting) or until `wake_fd` is readable first (false: nothing read that
  /// read_reply() would not find), within the socket timeout as a read is (TimeoutError, the
  /// connection dropped). With a cluster URL it does not wait: true (read_reply() waits).
  bool await_reply(int wake_fd);

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
  std::uint64_t generation() const noexcept;
  /// CLIENT ID of the current connection (with a cluster URL: of the master commands without
  /// keys go to).
  std::int64_t client_id() const noexcept;
  const ConnectionConfig& config() const noexcept { return config_; }
  /// Whether replies are owed: commands appended whose replies were not read yet.
  bool owes_replies() const noexcept { return owed_ > 0; }
  /// With a cluster URL: calls `visit(node)` with a connection to every master of the slot map
  /// (read again first), for commands that each master answers for its own keys (SCAN, INFO).
  /// Without one: `visit(*this)`. Throws what connecting to a master throws.
  void for_each_master(const std::function<void(Connection&)>& visit);
  /// Where this connection goes or went: the URL's address, with a sentinel URL the master's
  /// name and the address the sentinels gave for it, with a cluster URL the master it used
  /// last (for messages, and to tell which server a CLIENT ID belongs to).
  std::string describe() const;

 private:
  // Sentinel mode (sentinel.cpp).
  /// Sentinel mode: the master's address from the first sentinel that knows it, all of them
  /// within `budget`. Throws ConnectionError when none answers, ReplyError when a
  /// sentinel refused (AUTH) and none answered, ConfigError when every sentinel answered and
  /// none knows the master's name.
  HostPort ask_sentinels(Millis budget);
  [[noreturn]] void fail(const char* during);
  [[noreturn]] void fail_timeout(const char* during);
  /// Writes what append() queued (under the SIGPIPE guard).
  void write_queued(const char* during);
  void set_timeout(Millis timeout);
  Reply next_reply(const char* during);
  /// The next reply from the reader, reading the socket until it is complete.
  Reply receive(const char* during);

  ConnectionConfig config_;
  redisContext* ctx_ = nullptr;
  Backoff backoff_;
  std::uint64_t generation_ = 0;
  std::int64_t client_id_ = -1;
  std::string out_;             // the command being formatted, reused
  std::optional<Reply> ready_;  // a reply await_reply() took from the reader, for read_reply()
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
  std::unique_ptr<ClusterRouter> cluster_;  // set with a redis+cluster:// URL (cluster_router.hpp)
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

}  // namespace streamq::detail
