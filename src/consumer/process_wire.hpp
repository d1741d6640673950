// SPDX-License-Identifier: MIT
// What the worker, its fork server and the children say to each other over their Unix sockets:
// frames (a kind byte, a length, the bytes), and the messages in them: a task handed to a
// child, a report write it asks for, and how its handler ended.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "streamq/task.hpp"

namespace streamq::detail {

/// Frame kinds. Worker to fork server: spawn, signal, reap; fork server to worker: spawned (the
/// child's socket rides along as SCM_RIGHTS), failed, done, reaped. Worker to child: task,
/// written; child to worker: write, report.
enum class FrameKind : std::uint8_t {
  spawn = 'S',
  signal = 'G',
  reap = 'K',
  spawned = 'P',
  failed = 'E',
  done = 'O',
  reaped = 'X',
  task = 'T',
  write = 'W',
  written = 'A',
  report = 'R',
};

struct Frame {
  FrameKind kind{};
  std::string body;
};

/// Appends and reads little-endian integers and length-prefixed bytes.
class WireWriter {
 public:
  WireWriter& u64(std::uint64_t v);
  WireWriter& bytes(std::string_view b);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}
  bool u64(std::uint64_t& v);
  bool bytes(std::string& out);
  bool at_end() const noexcept { return in_.empty(); }

 private:
  std::string_view in_;
};

/// Sends one frame whole (blocking, no SIGPIPE); `fd_to_pass` rides along when >= 0. False when
/// the peer is gone.
bool send_frame(int fd, FrameKind kind, std::string_view body, int fd_to_pass = -1);
/// Reads one frame whole (blocking); nullopt at EOF or an error. `passed` receives a descriptor
/// sent with it (-1 when none).
std::optional<Frame> receive_frame(int fd, int* passed = nullptr);

/// Collects frames from a descriptor read a piece at a time (the worker's side of a child).
class FrameBuffer {
 public:
  /// Reads what is there now; false at EOF or an error.
  bool fill(int fd);
  /// The next complete frame, if one is in.
  std::optional<Frame> next();

 private:
  std::string data_;
  std::size_t used_ = 0;
};

/// A task as a child rebuilds it.
struct TaskMessage {
  std::string entry_id;
  Fields fields;
  std::int64_t deliveries = 1;
  std::chrono::system_clock::time_point created_at{};
  int retry_count = 0;
  int max_retries = 0;
  bool tracked = false;
};
std::string encode(const TaskMessage& m);
std::optional<TaskMessage> decode_task(std::string_view in);

/// How a child's handler ended, and the result it set. `retiring`: the child leaves after this
/// report (tasks_per_child reached, memory_per_child passed).
enum class Ended : std::uint8_t { returned = 1, failed, permanent, bad_payload, retry_after };
struct Report {
  Ended ended = Ended::failed;
  std::uint64_t retry_ms = 0;
  std::string error;
  std::optional<std::string> result;
  bool retiring = false;
};
std::string encode(const Report& r);
/// The report, or nullopt when `in` is not exactly one well-formed report.
std::optional<Report> decode_report(std::string_view in);

}  // namespace streamq::detail
