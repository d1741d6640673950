// SPDX-License-Identifier: MIT
#include "process_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "log.hpp"
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

/// The report, or nullopt when `in` is not exactly one well-formed report.
std::optional<Report> decode(std::string_view in) {
  Report r;
  if (in.empty()) return std::nullopt;
  const auto ended = static_cast<std::uint8_t>(in[0]);
  if (ended < 1 || ended > 5) return std::nullopt;
  r.ended = static_cast<Ended>(ended);
  in.remove_prefix(1);
  if (!get_u64(in, r.retry_ms) || !get_bytes(in, r.error) || in.empty()) return std::nullopt;
  const char flag = in[0];
  if (flag != 0 && flag != 1) return std::nullopt;
  in.remove_prefix(1);
  if (flag == 1) {
    std::string result;
    if (!get_bytes(in, result)) return std::nullopt;
    r.result = std::move(result);
  }
  if (!in.empty()) return std::nullopt;
  return r;
}

/// Writes all of `bytes` to `fd`; false on an error.
bool write_all(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + sent, bytes.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

/// The child: runs the handler, writes its report to `fd`, and leaves with _exit (no atexit
/// handler or static destructor of the worker runs here).
[[noreturn]] void child_main(int fd, pid_t worker, const std::function<void()>& handler,
                             const ProcessLimits& limits, TaskControl& control,
                             std::unique_ptr<Channel>& channel) {
  // Signals were blocked around the fork: the worker's handlers (its signal hub writes to the
  // worker's pipe) are replaced before any can be delivered here. SIGTERM then ends the child.
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) std::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  // It dies with the worker's handler thread (a worker killed, or exiting with it still
  // running), and is a process group of its own: a Ctrl-C for the worker's group is not its.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != worker) _exit(3);  // the worker died before the line above
  setpgid(0, 0);
  silence_log();            // the log's lock may have been held by another worker thread at the fork
  (void)channel.release();  // the worker's connection: the child must not use (or close) it
  const pid_t self = getpid();
  Report r;
  const auto limit = [&](int resource, rlim_t value, rlim_t hard, const char* name) {
    const rlimit l{value, hard};
    if (setrlimit(resource, &l) == 0) return true;
    r.ended = Ended::failed;
    r.error = std::string("process executor: setrlimit(") + name + "): " + std::strerror(errno);
    return false;
  };
  bool limited = true;
  if (limits.address_space > 0) {
    limited = limit(RLIMIT_AS, limits.address_space, limits.address_space, "RLIMIT_AS");
  }
  if (limited && limits.cpu.count() > 0) {
    const auto secs = static_cast<rlim_t>(limits.cpu.count());
    limited = limit(RLIMIT_CPU, secs, secs + 1, "RLIMIT_CPU");  // SIGXCPU, then SIGKILL a second later
  }
  if (!limited) {
    _exit(write_all(fd, encode(r)) ? 0 : 2);
  }
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
  // A process the handler forked without exec comes back here too: only the child reports.
  if (getpid() != self) _exit(0);
  int status = 0;
  try {
    if (control.reports) r.result = control.reports->close();
    if (!write_all(fd, encode(r))) status = 2;
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
  {
    std::lock_guard lock(control.mutex);
    // Asked to stop (or given up) while a middleware ran: no process to start.
    if (control.abandoned || control.why() != StopWhy::none) {
      throw Error(std::string("asked to stop (") + std::string(to_string(control.why())) +
                  ") before its process started");
    }
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("process executor: pipe: ") + std::strerror(errno));
  // Every signal blocked across the fork (see child_main); this thread's mask back after it.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  const pid_t worker = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    child_main(fds[1], worker, handler, limits, control, channel);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw Error(std::string("process executor: fork: ") + std::strerror(fork_errno));
  }
  setpgid(pid, pid);  // (also done by the child: whichever comes first; the group is the child's)
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
  bool eof = false, reaped = true;
  const auto gone = [&] {
    if (exited) return true;
    const pid_t w = waitpid(pid, &status, WNOHANG);
    // ECHILD: the application reaps children itself (or ignores SIGCHLD): the child is gone,
    // its status unknown.
    if (w == pid || (w < 0 && errno == ECHILD)) {
      exited = true;
      reaped = w == pid;
    }
    return exited;
  };
  // Stops the child's group (the child and what it started) once the task is asked to stop.
  const auto enforce = [&] {
    // (Not for the worker's stop: a child, like a thread, gets shutdown_grace to finish.)
    if (!terminated && control.why() != StopWhy::none && control.why() != StopWhy::shutdown) {
      kill(-pid, SIGTERM);
      terminated = true;
      kill_at = Clock::now() + grace / 2;
    }
    if (!killed && Clock::now() >= kill_at) {
      kill(-pid, SIGKILL);
      killed = true;
    }
  };
  while (!eof) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 50) > 0) {
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) {
        data.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || errno != EINTR) eof = true;
    }
    if (!eof && gone()) {
      // Whatever the child wrote is in the pipe by now.
      const int flags = fcntl(fds[0], F_GETFL);
      fcntl(fds[0], F_SETFL, flags | O_NONBLOCK);
      ssize_t n = 0;
      while ((n = read(fds[0], buf, sizeof buf)) > 0) data.append(buf, static_cast<std::size_t>(n));
      break;
    }
    if (!eof) enforce();
  }
  close(fds[0]);
  // The pipe closed (the child ended, or closed it): wait for its end, still stopping it when
  // asked.
  while (!gone()) {
    enforce();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::optional<Report> r = decode(data);
  const bool clean_exit = !reaped || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!r || !clean_exit) throw Error(reaped ? death(status) : "the handler's process ended without a report");
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
