// SPDX-License-Identifier: MIT
#include "process_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "streamq/errors.hpp"
#include "task_reports.hpp"

namespace streamq::detail {
namespace {

/// What a child reports of its handler: how it ended, and the result it set.
enum class Ended : std::uint8_t { returned = 1, failed, permanent, bad_payload, retry_after };

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool get_u64(std::string_view& in, std::uint64_t& v) {
  if (in.size() < 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  in.remove_prefix(8);
  return true;
}

bool get_bytes(std::string_view& in, std::string& out) {
  std::uint64_t n = 0;
  if (!get_u64(in, n) || in.size() < n) return false;
  out.assign(in.substr(0, n));
  in.remove_prefix(n);
  return true;
}

struct Report {
  Ended ended = Ended::failed;
  std::uint64_t retry_ms = 0;
  std::string error;
  std::optional<std::string> result;
};

std::string encode(const Report& r) {
  std::string out;
  out.push_back(static_cast<char>(r.ended));
  put_u64(out, r.retry_ms);
  put_u64(out, r.error.size());
  out += r.error;
  out.push_back(r.result ? 1 : 0);
  if (r.result) {
    put_u64(out, r.result->size());
    out += *r.result;
  }
  return out;
}

std::optional<Report> decode(std::string_view in) {
  Report r;
  if (in.empty()) return std::nullopt;
  const auto ended = static_cast<std::uint8_t>(in[0]);
  if (ended < 1 || ended > 5) return std::nullopt;
  r.ended = static_cast<Ended>(ended);
  in.remove_prefix(1);
  if (!get_u64(in, r.retry_ms) || !get_bytes(in, r.error) || in.empty()) return std::nullopt;
  const bool has_result = in[0] == 1;
  in.remove_prefix(1);
  if (has_result) {
    std::string result;
    if (!get_bytes(in, result)) return std::nullopt;
    r.result = std::move(result);
  }
  return r;
}

/// The child: runs the handler, writes its report to `fd`, and leaves with _exit (no atexit
/// handler or static destructor of the worker runs here).
[[noreturn]] void child_main(int fd, const std::function<void()>& handler, const ProcessLimits& limits,
                             TaskControl& control, std::unique_ptr<Channel>& channel) {
  // The worker's signal handlers and mask are not the child's: SIGTERM stops it.
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  if (limits.address_space > 0) {
    const rlimit r{limits.address_space, limits.address_space};
    setrlimit(RLIMIT_AS, &r);
  }
  if (limits.cpu.count() > 0) {
    const auto s = static_cast<rlim_t>(limits.cpu.count());
    const rlimit r{s, s + 1};  // SIGXCPU at the soft limit, SIGKILL a second later
    setrlimit(RLIMIT_CPU, &r);
  }
  (void)channel.release();  // the worker's connection: the child must not use (or close) it
  Report r;
  try {
    handler();
    r.ended = Ended::returned;
  } catch (const RetryAfter& e) {
    r.ended = Ended::retry_after;
    r.retry_ms = static_cast<std::uint64_t>(e.delay().count());
    r.error = e.what();
  } catch (const BadPayloadError& e) {
    r.ended = Ended::bad_payload;
    r.error = e.what();
  } catch (const PermanentError& e) {
    r.ended = Ended::permanent;
    r.error = e.what();
  } catch (const std::exception& e) {
    r.ended = Ended::failed;
    r.error = e.what();
  } catch (...) {
    r.ended = Ended::failed;
    r.error = "unknown exception";
  }
  int status = 0;
  try {
    if (control.reports) r.result = control.reports->close();
    const std::string bytes = encode(r);
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = write(fd, bytes.data() + sent, bytes.size() - sent);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    if (sent < bytes.size()) status = 2;
  } catch (...) {
    status = 2;  // (memory) the worker sees no report: a failure
  }
  _exit(status);
}

std::string death(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "the handler's process was killed by signal " + std::to_string(sig) + " (" +
           (name != nullptr ? name : "?") + ")";
  }
  if (WIFEXITED(status)) {
    return "the handler's process exited with status " + std::to_string(WEXITSTATUS(status)) +
           " before it reported";
  }
  return "the handler's process ended without a report";
}

}  // namespace

void run_in_child(const Task& task, const std::function<void()>& handler, const ProcessLimits& limits,
                  TaskControl& control, std::chrono::milliseconds grace, std::unique_ptr<Channel>& channel) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("process executor: pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close(fds[0]);
    close(fds[1]);
    throw Error(std::string("process executor: fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    close(fds[0]);
    child_main(fds[1], handler, limits, control, channel);
  }
  close(fds[1]);
  // Reads the report until EOF or the child's end (a process forked meanwhile by another
  // handler thread may hold the pipe's write end too: the child's end is the answer then),
  // stopping it once the task is asked to stop.
  using Clock = std::chrono::steady_clock;
  std::string data;
  char buf[4096];
  bool terminated = false, killed = false, exited = false;
  Clock::time_point kill_at = Clock::time_point::max();
  int status = 0;
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 50);
    bool eof = false;
    if (ready > 0) {
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) {
        data.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      eof = n == 0 || errno != EINTR;
    }
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) exited = true;
    if (eof || exited) {
      if (exited && !eof) {
        // Whatever the child wrote is in the pipe by now.
        const int flags = fcntl(fds[0], F_GETFL);
        fcntl(fds[0], F_SETFL, flags | O_NONBLOCK);
        ssize_t n = 0;
        while ((n = read(fds[0], buf, sizeof buf)) > 0) data.append(buf, static_cast<std::size_t>(n));
      }
      break;
    }
    const StopWhy why = control.why();
    if (!terminated && why != StopWhy::none) {
      kill(pid, SIGTERM);
      terminated = true;
      kill_at = Clock::now() + grace / 2;
    }
    if (!killed && Clock::now() >= kill_at) {
      kill(pid, SIGKILL);
      killed = true;
    }
  }
  close(fds[0]);
  if (!exited) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  const std::optional<Report> r = decode(data);
  if (!r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error(death(status));
  if (r->result) task.set_result(*r->result);
  switch (r->ended) {
    case Ended::returned: return;
    case Ended::retry_after: throw RetryAfter(std::chrono::milliseconds(r->retry_ms), r->error);
    case Ended::bad_payload: throw BadPayloadError(r->error);
    case Ended::permanent: throw PermanentError(r->error);
    case Ended::failed: break;
  }
  throw Error(r->error);
}

}  // namespace streamq::detail
