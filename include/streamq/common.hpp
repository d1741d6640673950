// SPDX-License-Identifier: MIT
// The vocabulary every part of streamq shares: how to reach Redis (ConnectionOptions,
// TlsOptions), a task's Priority, what a full queue does (Overflow), how long a finished task's
// record stays (Retention), and the queue settings every writer of tasks has (QueueOptions).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "streamq/export.hpp"

namespace streamq {

/// TLS settings of a `rediss://` connection (see ConnectionOptions::url). Each text setting
/// may instead be given in the URL's query (`tls_ca_file=`, `tls_ca_dir=`, `tls_cert_file=`,
/// `tls_key_file=`, `tls_server_name=`, percent-encoded); a setting given in both with
/// different values is a ConfigError. Setting any of them with a URL that is not `rediss://`
/// is a ConfigError too. Files are read when the Producer, Consumer, ... is constructed:
/// one that cannot be read is a ConfigError naming the field.
struct STREAMQ_EXPORT TlsOptions {
  /// PEM file with the certificates of the CAs that may sign the server's certificate.
  /// With ca_dir also empty, the system's default CAs (/etc/ssl/certs) are used.
  std::string ca_file{};
  /// Directory of CA certificates in OpenSSL's hashed layout (`openssl rehash`).
  std::string ca_dir{};
  /// Client certificate (PEM, may hold its chain) and its private key, for a server with
  /// `tls-auth-clients yes`. Both or neither.
  std::string cert_file{};
  std::string key_file{};
  /// The name the server's certificate must carry, and the SNI sent; empty = the URL's host
  /// (an IP address is then checked against the certificate's IP addresses).
  std::string server_name{};
  /// Check the server's certificate chain and name. false (or `tls_verify=no` in the URL)
  /// accepts any certificate: encryption without authentication, for tests only.
  bool verify = true;
};

/// Where and how to reach Redis. Shared by Producer, Consumer and StatsReader.
struct STREAMQ_EXPORT ConnectionOptions {
  /// `redis://[user[:password]@]host[:port][/db]` or `unix:///path/to/redis.sock[?db=N]`
  /// (unix URLs also take `user=` and `password=` query parameters). User and password may
  /// be percent-encoded. Default port 6379, default db 0.
  ///
  /// `rediss://...` (same form as `redis://`): TLS, configured by `tls` below. Needs a streamq
  /// built with TLS (streamq::tls_supported; docs/tls.md says how); any other build
  /// refuses the URL with a ConfigError. TLS to Redis Cluster or through Sentinel is not
  /// supported (a ConfigError).
  ///
  /// `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/master-name[/db]`
  /// (query `sentinel_user=` and `sentinel_password=` for the sentinels' own AUTH; the user
  /// and password in front are the data nodes'; sentinel port default 26379): every connect
  /// asks the sentinels where the master is and checks its ROLE; a READONLY or UNBLOCKED
  /// reply (a demoted master) makes the next call ask again.
  std::string url = "redis://127.0.0.1:6379";
  /// Upper bound for establishing a connection (TCP connect plus AUTH/SELECT/SETNAME).
  std::chrono::milliseconds connect_timeout{2000};
  /// Upper bound for one command's reply. The Consumer's blocking read waits up to
  /// ConsumerOptions::block, so the Consumer requires socket_timeout > block + 1 s.
  std::chrono::milliseconds socket_timeout{5000};
  /// Sent with CLIENT SETNAME after every connect; empty = "streamq-<role>".
  /// Must not contain spaces.
  std::string client_name{};
  /// Reconnect backoff: the n-th consecutive attempt waits a uniformly random time in
  /// [0, min(backoff_max, backoff_base * 2^n)] ("full jitter").
  std::chrono::milliseconds backoff_base{50};
  /// 0 = the role's default: 2 s for a Producer and a StatsReader (their caller waits), 30 s
  /// for a Consumer (nobody waits, and a wrong or dead host should not be hammered), or
  /// backoff_base if that is larger. Otherwise it must be >= backoff_base.
  std::chrono::milliseconds backoff_max{0};
  /// With a `rediss://` URL: certificates and checks (verification is on by default).
  TlsOptions tls{};
};

/// A task's priority. Normal tasks live in the queue's stream itself (`<stream>`, as the
/// seed's code reads and writes it); high and low ones in sibling streams `<stream>:p:high`
/// and `<stream>:p:low`, which share the stream's hash tag. Consumers serve high before
/// normal before low (see ConsumerOptions::priority_weights).
enum class Priority {
  high,
  normal,
  low,
};

/// What a Producer does when the queue is full.
enum class Overflow {
  /// Refuse the task with QueueFullError when the stream holds max_len or more unfinished
  /// entries (streamq deletes finished entries, so XLEN is the backlog). Checked and written
  /// in one server-side script, so MAXLEN never trims work nobody has run. Default.
  reject,
  /// The seed's behaviour: always add, and let `XADD MAXLEN ~ max_len` trim the oldest
  /// entries, read or not. Trimmed unread tasks are gone; trimmed pending ones are
  /// dead-lettered as "body lost" by the Consumer's reclaimer.
  trim_oldest,
};

/// How long a finished task's record (state, attempts, times, error, result) stays, by Redis
/// TTL. Setting one (EnqueueOptions::retention, or ProducerOptions::retention for every task)
/// makes a task tracked: it gets a record `<stream>:task:<task_id>` and its changes of state
/// are events of `<stream>:events` (see TaskRecord, Producer::wait). An untracked task costs
/// nothing of this.
struct STREAMQ_EXPORT Retention {
  /// After the task succeeded (or was cancelled). 0 = the record goes at once (the 'done'
  /// event still says the task is done, but its result is not kept: Producer::wait needs more).
  std::chrono::milliseconds done{0};
  /// After it was dead-lettered. Unset = as long as its dead letter: the record goes when an
  /// Inspector deletes or purges the dead letter, and starts again when it is replayed.
  std::optional<std::chrono::milliseconds> dead{};
};

/// The settings of a queue that a writer of its tasks needs: where it is, its partitions, its
/// bound, and the defaults of the tasks written (SchedulerOptions::queue; ProducerOptions has the
/// same fields, documented there). Validated by the class that takes them (ConfigError names the
/// field).
struct STREAMQ_EXPORT QueueOptions {
  ConnectionOptions connection{};
  /// The queue's stream (ProducerOptions::stream).
  std::string stream = "task_queue";
  /// The queue's partitions (ProducerOptions::partitions), 1 to 1024.
  int partitions = 1;
  /// Backlog bound (ProducerOptions::max_len). Must be > 0.
  std::int64_t max_len = 10000;
  /// What a full queue does (ProducerOptions::overflow).
  Overflow overflow = Overflow::reject;
  /// Retries allowed after the first attempt, unless a task says otherwise. Must be >= 0.
  int default_max_retries = 3;
  /// Payloads larger or deeper than these are refused with PayloadError.
  std::size_t max_payload_bytes = 1 << 20;
  int max_payload_depth = 64;
};

}  // namespace streamq
