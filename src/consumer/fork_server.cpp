// SPDX-License-Identifier: MIT
// The fork server and its children (see process_pool.hpp). Both are copies of the worker made
// by fork without exec: they leave with _exit (no atexit handler or static destructor of the
// worker runs in them), log nothing (the log's lock may be held by a thread that is not here),
// and take no lock of the worker's.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "log.hpp"
#include "process_pool.hpp"
#include "shared.hpp"
#include "streamq/errors.hpp"
#include "task_control.hpp"
#include "task_reports.hpp"
#include "wire/task_factory.hpp"

namespace streamq::detail {
namespace {

/// Sent to a child when its fork server ends (PR_SET_PDEATHSIG): it kills its own process group.
const int kServerGone = SIGRTMAX - 1;

void kill_own_group(int) { kill(0, SIGKILL); }

/// The signals a stop of the worker's sends (a service manager may send them to every process
/// of the service).
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};

/// Default dispositions (but the stop signals ignored when `ignore_stops`) and an empty mask,
/// for what a worker may have set up; the dispositions before the mask, so that nothing pending
/// from the fork's window meets the worker's handlers or a default it should not.
void reset_signals(bool ignore_stops) {
  for (const int sig : {SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD, SIGALRM}) std::signal(sig, SIG_DFL);
  for (const int sig : kStopSignals) std::signal(sig, ignore_stops ? SIG_IGN : SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

std::int64_t now_ns() { return lease_time(Clock::now()); }

// ---- the child

/// The resident set of this process, bytes (0 when unknown).
std::uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<std::uint64_t>(resident) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE))
                : 0;
}

/// Seconds of CPU this process used so far, rounded up.
rlim_t cpu_seconds_used() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const long usec = u.ru_utime.tv_usec + u.ru_stime.tv_usec;
  return static_cast<rlim_t>(u.ru_utime.tv_sec + u.ru_stime.tv_sec + usec / 1000000 + 1);
}

/// The task's limits, set on the soft limits only (so they can be set back after it, for the
/// next task); RLIMIT_CPU counts from what the child used so far. An error text when the kernel
/// refused one.
std::string apply_limits(const ProcessLimits& limits, const rlimit& as0, const rlimit& cpu0) {
  const auto set = [](int resource, rlim_t soft, rlim_t hard, const char* name) -> std::string {
    const rlimit l{soft, hard};
    if (setrlimit(resource, &l) == 0) return {};
    return std::string("process executor: setrlimit(") + name + "): " + std::strerror(errno);
  };
  if (limits.address_space > 0) {
    if (std::string e = set(RLIMIT_AS, limits.address_space, as0.rlim_max, "RLIMIT_AS"); !e.empty()) return e;
  }
  if (limits.cpu.count() > 0) {
    const rlim_t soft = cpu_seconds_used() + static_cast<rlim_t>(limits.cpu.count());
    if (std::string e = set(RLIMIT_CPU, soft, cpu0.rlim_max, "RLIMIT_CPU"); !e.empty()) return e;
  }
  return {};
}

/// Runs the handler of `task`'s type; what the child reports of it.
Report run_one(const Registrations& handlers, const Task& task, const rlimit& as0, const rlimit& cpu0) {
  Report r;
  const auto it = handlers.find(task.type());
  if (it == handlers.end() || it->second.options.executor != HandlerExecutor::process) {
    r.error = "process executor: the fork server has no process handler for \"" + task.type() +
              "\" (registered after it was forked?)";
    return r;
  }
  if (r.error = apply_limits(it->second.options.limits, as0, cpu0); !r.error.empty()) return r;
  try {
    it->second.handler(task);
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
    r.error = e.what();
  } catch (...) {
    r.error = "unknown exception";
  }
  return r;
}

/// The child's socket, closed in every process a handler forks from the child (pthread_atfork):
/// only the child may hold it, so that its end is seen the moment the child ends. (A program it
/// starts with exec loses it anyway: the socket is close-on-exec.)
/// (Its number is taken by /dev/null rather than freed: a handler's report in the fork then
/// fails, as on a closed socket, instead of writing into whatever the fork opens next.)
int g_task_socket = -1;
void close_task_socket_in_fork() {
  if (g_task_socket < 0) return;
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0 && dup3(null, g_task_socket, O_CLOEXEC) >= 0) {
    close(null);
  } else {
    if (null >= 0) close(null);
    close(g_task_socket);
  }
  g_task_socket = -1;
}

/// A child: takes tasks from `fd` one at a time until the worker closes it, or until it retires.
[[noreturn]] void child_main(int fd, pid_t server, const Registrations& handlers) {
  setpgid(0, 0);  // its own process group: what it starts is stopped with it
  g_task_socket = fd;
  pthread_atfork(nullptr, nullptr, close_task_socket_in_fork);
  struct sigaction gone {};
  gone.sa_handler = kill_own_group;
  sigaction(kServerGone, &gone, nullptr);
  prctl(PR_SET_PDEATHSIG, kServerGone);
  if (getppid() != server) kill(0, SIGKILL);  // the fork server ended before the line above
  const pid_t self = getpid();
  rlimit as0{}, cpu0{};
  getrlimit(RLIMIT_AS, &as0);
  getrlimit(RLIMIT_CPU, &cpu0);
  std::uint64_t tasks = 0;
  for (;;) {
    std::optional<Frame> f = receive_frame(fd);
    if (!f) _exit(0);  // the worker is done with it
    std::optional<TaskMessage> m = f->kind == FrameKind::task ? decode_task(f->body) : std::nullopt;
    if (!m) _exit(4);
    Task task =
        TaskFactory::make(std::move(m->entry_id), std::make_shared<const Fields>(std::move(m->fields)),
                          m->deliveries, m->created_at, m->retry_count, m->max_retries);
    std::shared_ptr<TaskReports> reports;
    if (m->tracked) {
      // Progress and partial results go to the worker, which holds them for its completer.
      reports = std::make_shared<TaskReports>([fd](std::string_view what, const std::string& value) {
        if (!send_frame(fd, FrameKind::write, WireWriter().bytes(what).bytes(value).take())) return false;
        const std::optional<Frame> answer = receive_frame(fd);
        return answer && answer->kind == FrameKind::written && answer->body == "1";
      });
      TaskAccess::attach(task, reports);
    }
    Report r = run_one(handlers, task, as0, cpu0);
    // A process the handler forked without exec comes back here too: only the child reports.
    if (getpid() != self) _exit(0);
    setrlimit(RLIMIT_AS, &as0);
    setrlimit(RLIMIT_CPU, &cpu0);
    if (reports) r.result = reports->close();
    ++tasks;
    if (const auto it = handlers.find(task.type()); it != handlers.end()) {
      const ProcessLimits& l = it->second.options.limits;
      r.retiring = tasks >= static_cast<std::uint64_t>(l.tasks_per_child) ||
                   (l.memory_per_child > 0 && resident_bytes() > l.memory_per_child);
    }
    if (!send_frame(fd, FrameKind::report, encode(r))) _exit(2);
    if (r.retiring) _exit(0);
  }
}

// ---- the fork server

struct Known {
  std::size_t slot = 0;
  bool reaped = false;
  int status = 0;
  bool by_deadline = false;
};

/// The processes whose parent is this one (children, and orphans it adopted as subreaper).
std::vector<pid_t> own_children() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300];
    std::snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) continue;
    char buf[512];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char* close_paren = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
    char state = 0;
    int ppid = 0;
    if (close_paren != nullptr && std::sscanf(close_paren + 1, " %c %d", &state, &ppid) == 2 &&
        ppid == self) {
      out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    }
  }
  closedir(d);
  return out;
}

class ForkServer {
 public:
  ForkServer(int control, pid_t worker, const Registrations& handlers, std::atomic<std::int64_t>* deadlines,
             std::size_t slots)
      : control_(control), handlers_(handlers), deadlines_(deadlines), slots_(slots), worker_(worker) {}

  [[noreturn]] void run() {
    for (;;) {
      // The worker ended, however: its end of the socket closes (below), unless a copy of it
      // lives on in a process the application forked; the parent changing (to a subreaper or
      // init) says it in any case.
      if (getppid() != worker_) end_all();
      reap();
      const bool watching = enforce_deadlines();
      pollfd p{control_, POLLIN, 0};
      const int ready = poll(&p, 1, watching ? 20 : 250);
      if (ready <= 0) continue;
      int ignored = -1;
      std::optional<Frame> f = receive_frame(control_, &ignored);
      if (ignored >= 0) close(ignored);
      if (!f) end_all();  // the worker ended (or closed the pool)
      answer(*f);
    }
  }

 private:
  void answer(const Frame& f) {
    WireReader r(f.body);
    std::uint64_t a = 0, b = 0;
    switch (f.kind) {
      case FrameKind::spawn:
        if (r.u64(a) && a < slots_) return spawn(static_cast<std::size_t>(a));
        break;
      case FrameKind::signal:
        if (r.u64(a) && r.u64(b)) {
          if (const auto it = known_.find(static_cast<pid_t>(a)); it != known_.end() && !it->second.reaped) {
            kill(-it->first, static_cast<int>(b));
          }
          send_frame(control_, FrameKind::done, {});
          return;
        }
        break;
      case FrameKind::reap:
        if (r.u64(a)) return reap_one(static_cast<pid_t>(a));
        break;
      default: break;
    }
    send_frame(control_, FrameKind::failed, "a malformed request");
  }

  void spawn(std::size_t slot) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      send_frame(control_, FrameKind::failed, std::string("socketpair: ") + std::strerror(errno));
      return;
    }
    const pid_t server = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      close(control_);
      close(sv[0]);
      reset_signals(false);
      child_main(sv[1], server, handlers_);
    }
    close(sv[1]);
    if (pid < 0) {
      close(sv[0]);
      send_frame(control_, FrameKind::failed, std::string("fork: ") + std::strerror(errno));
      return;
    }
    setpgid(pid, pid);  // (the child does it too: whichever comes first)
    known_[pid] = Known{slot};
    send_frame(control_, FrameKind::spawned, WireWriter().u64(static_cast<std::uint64_t>(pid)).take(), sv[0]);
    close(sv[0]);
  }

  void reap_one(pid_t pid) {
    const auto it = known_.find(pid);
    if (it == known_.end()) {
      send_frame(control_, FrameKind::reaped, WireWriter().u64(0).u64(0).u64(0).take());
      return;
    }
    if (!it->second.reaped) {
      kill(-pid, SIGKILL);  // with what it started
      // A process in uninterruptible sleep (a hung mount) ends only when its I/O does: after a
      // second the worker is answered without its status, and the reap is left to reap().
      for (const std::int64_t give_up = now_ns() + 1'000'000'000; !it->second.reaped && now_ns() < give_up;) {
        int status = 0;
        const pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) {
          it->second.reaped = true;
          it->second.status = status;
        } else if (got < 0 && errno != EINTR) {
          break;
        } else {
          usleep(1000);
        }
      }
    }
    const Known k = it->second;
    known_.erase(it);
    send_frame(control_, FrameKind::reaped,
               WireWriter()
                   .u64(k.reaped ? 1 : 0)
                   .u64(static_cast<std::uint64_t>(k.status))
                   .u64(k.by_deadline ? 1 : 0)
                   .take());
  }

  /// Reaps what ended: a child's status is kept for the worker's reap; an adopted orphan's goes.
  /// A child that ended (a crash, its retirement) takes its group with it: what it started
  /// there is killed while the child is still a zombie, so its pid, the group's id, cannot have
  /// been given to another process yet.
  void reap() {
    for (;;) {
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
      const pid_t pid = info.si_pid;
      const auto it = known_.find(pid);
      if (it != known_.end()) kill(-pid, SIGKILL);
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (it != known_.end()) {
        it->second.reaped = true;
        it->second.status = status;
      }
    }
  }

  /// Kills the children whose deadline passed; whether any child has one.
  bool enforce_deadlines() {
    bool any = false;
    const std::int64_t now = now_ns();
    for (auto& [pid, k] : known_) {
      if (k.reaped) continue;
      const std::int64_t until = deadlines_[k.slot].load(std::memory_order_relaxed);
      if (until == 0) continue;
      any = true;
      if (now < until) continue;
      kill(-pid, SIGKILL);
      k.by_deadline = true;
      deadlines_[k.slot].store(0, std::memory_order_relaxed);
    }
    return any;
  }

  /// The worker is gone: every child's group, then every process left that has this one as its
  /// parent (adopted as their subreaper), until none is left or two seconds passed.
  [[noreturn]] void end_all() {
    for (const auto& [pid, k] : known_) {
      if (!k.reaped) kill(-pid, SIGKILL);
    }
    const std::int64_t give_up = now_ns() + 2'000'000'000;
    while (now_ns() < give_up) {
      for (const pid_t p : own_children()) kill(p, SIGKILL);
      int status = 0;
      pid_t pid = 0;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      }
      if (pid < 0 && errno == ECHILD) break;
      usleep(5000);
    }
    _exit(0);
  }

  const int control_;
  const Registrations& handlers_;
  std::atomic<std::int64_t>* const deadlines_;
  const std::size_t slots_;
  const pid_t worker_;
  std::map<pid_t, Known> known_;
};

}  // namespace

void serve_forks(int control, pid_t worker, const Registrations& handlers,
                 std::atomic<std::int64_t>* deadlines, std::size_t slots) {
  silence_log();  // the log's lock may have been held by another worker thread at the fork
  // Its own process group, so a Ctrl-C for the worker's group leaves the children to the
  // worker's graceful stop; the subreaper of what its children start.
  setpgid(0, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // A service manager's stop may signal every process of the service (systemd's
  // KillMode=control-group): the fork server is ended by its socket or its parent's end, not by
  // these. (Its children set them back to their defaults.)
  reset_signals(true);
  ForkServer(control, worker, handlers, deadlines, slots).run();
}

}  // namespace streamq::detail
