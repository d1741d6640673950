// SPDX-License-Identifier: MIT
#include "process_wire.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace streamq::detail {

WireWriter& WireWriter::u64(std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}

WireWriter& WireWriter::bytes(std::string_view b) {
  u64(b.size());
  out_ += b;
  return *this;
}

bool WireReader::u64(std::uint64_t& v) {
  if (in_.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in_[i])) << (8 * i);
  in_.remove_prefix(8);
  return true;
}

bool WireReader::bytes(std::string& out) {
  std::uint64_t n = 0;
  if (!u64(n) || in_.size() < n) return false;
  out.assign(in_.substr(0, n));
  in_.remove_prefix(n);
  return true;
}

namespace {

constexpr std::size_t kHeader = 9;  // kind, then the body's length (u64)

std::string header(FrameKind kind, std::size_t length) {
  std::string h(1, static_cast<char>(kind));
  h += WireWriter().u64(length).take();
  return h;
}

bool send_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
      continue;
    }
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool read_all(int fd, char* data, std::size_t size, int* passed) {
  while (size > 0) {
    iovec io{data, size};
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (passed != nullptr) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
    }
    const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (passed != nullptr) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
          std::memcpy(passed, CMSG_DATA(c), sizeof(int));
      }
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<Frame> parse_header(std::string_view h, std::uint64_t& length) {
  WireReader r(h.substr(1));
  if (!r.u64(length)) return std::nullopt;
  return Frame{static_cast<FrameKind>(h[0]), {}};
}

}  // namespace

bool send_frame(int fd, FrameKind kind, std::string_view body, int fd_to_pass) {
  const std::string h = header(kind, body.size());
  if (fd_to_pass >= 0) {
    // The descriptor goes with the header's first byte.
    iovec io{const_cast<char*>(h.data()), 1};
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
    ssize_t n = 0;
    do {
      n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != 1) return false;
    return send_all(fd, h.data() + 1, h.size() - 1) && send_all(fd, body.data(), body.size());
  }
  if (body.size() < 4096) {
    const std::string whole = h + std::string(body);
    return send_all(fd, whole.data(), whole.size());
  }
  return send_all(fd, h.data(), h.size()) && send_all(fd, body.data(), body.size());
}

std::optional<Frame> receive_frame(int fd, int* passed) {
  if (passed != nullptr) *passed = -1;
  char h[kHeader];
  if (!read_all(fd, h, kHeader, passed)) return std::nullopt;
  std::uint64_t length = 0;
  std::optional<Frame> f = parse_header(std::string_view(h, kHeader), length);
  if (!f) return std::nullopt;
  f->body.resize(length);
  if (length > 0 && !read_all(fd, f->body.data(), length, nullptr)) return std::nullopt;
  return f;
}

bool FrameBuffer::fill(int fd) {
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      data_.append(buf, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < sizeof buf) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
}

std::optional<Frame> FrameBuffer::next() {
  const std::string_view in = std::string_view(data_).substr(used_);
  if (in.size() < kHeader) return std::nullopt;
  std::uint64_t length = 0;
  std::optional<Frame> f = parse_header(in.substr(0, kHeader), length);
  if (!f || in.size() - kHeader < length) return std::nullopt;
  f->body.assign(in.substr(kHeader, length));
  used_ += kHeader + length;
  if (used_ == data_.size()) {
    data_.clear();
    used_ = 0;
  }
  return f;
}

std::string encode(const TaskMessage& m) {
  WireWriter w;
  w.bytes(m.entry_id).u64(m.fields.size());
  for (const auto& [k, v] : m.fields) w.bytes(k).bytes(v);
  w.u64(static_cast<std::uint64_t>(m.deliveries))
      .u64(static_cast<std::uint64_t>(m.created_at.time_since_epoch().count()))
      .u64(static_cast<std::uint64_t>(static_cast<std::int64_t>(m.retry_count)))
      .u64(static_cast<std::uint64_t>(static_cast<std::int64_t>(m.max_retries)))
      .u64(m.tracked ? 1 : 0);
  return w.take();
}

std::optional<TaskMessage> decode_task(std::string_view in) {
  WireReader r(in);
  TaskMessage m;
  std::uint64_t n = 0;
  if (!r.bytes(m.entry_id) || !r.u64(n)) return std::nullopt;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::string k, v;
    if (!r.bytes(k) || !r.bytes(v)) return std::nullopt;
    m.fields.emplace_back(std::move(k), std::move(v));
  }
  std::uint64_t deliveries = 0, created = 0, retry = 0, max = 0, tracked = 0;
  if (!r.u64(deliveries) || !r.u64(created) || !r.u64(retry) || !r.u64(max) || !r.u64(tracked) ||
      !r.at_end()) {
    return std::nullopt;
  }
  m.deliveries = static_cast<std::int64_t>(deliveries);
  m.created_at = std::chrono::system_clock::time_point(
      std::chrono::system_clock::duration(static_cast<std::chrono::system_clock::rep>(created)));
  m.retry_count = static_cast<int>(static_cast<std::int64_t>(retry));
  m.max_retries = static_cast<int>(static_cast<std::int64_t>(max));
  m.tracked = tracked == 1;
  return m;
}

std::string encode(const Report& r) {
  WireWriter w;
  w.u64(static_cast<std::uint64_t>(r.ended)).u64(r.retry_ms).bytes(r.error).u64(r.result ? 1 : 0);
  if (r.result) w.bytes(*r.result);
  w.u64(r.retiring ? 1 : 0);
  return w.take();
}

std::optional<Report> decode_report(std::string_view in) {
  WireReader rd(in);
  Report r;
  std::uint64_t ended = 0, has_result = 0, retiring = 0;
  if (!rd.u64(ended) || ended < 1 || ended > 5 || !rd.u64(r.retry_ms) || !rd.bytes(r.error) ||
      !rd.u64(has_result) || has_result > 1) {
    return std::nullopt;
  }
  r.ended = static_cast<Ended>(ended);
  if (has_result == 1) {
    std::string result;
    if (!rd.bytes(result)) return std::nullopt;
    r.result = std::move(result);
  }
  if (!rd.u64(retiring) || retiring > 1 || !rd.at_end()) return std::nullopt;
  r.retiring = retiring == 1;
  return r;
}

}  // namespace streamq::detail
