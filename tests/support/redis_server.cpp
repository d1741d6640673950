// SPDX-License-Identifier: MIT
#include "redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "streamq/errors.hpp"

namespace streamq::test {

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {

bool port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return free;
}

/// A free port whose cluster bus port (+10000) is a port, and free.
int free_cluster_port() {
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = free_port();
    if (port + 10000 <= 65535 && port_is_free(port + 10000)) return port;
  }
  throw std::runtime_error("cannot find a free port pair for a cluster node");
}

detail::ConnectionConfig client_config(const std::string& url) {
  ConnectionOptions o;
  o.url = url;
  o.connect_timeout = std::chrono::milliseconds(1000);
  o.socket_timeout = std::chrono::milliseconds(10000);
  o.client_name = "streamq-test";
  return detail::make_connection_config(o, "test");
}

}  // namespace

pid_t spawn_child(const std::string& binary, std::vector<char*>& argv, const std::string& stderr_path) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;  // parent (or -1)
  // The child dies with the test process, even when the test is killed (a timeout): no
  // server or worker outlives the test that started it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);  // the parent died before prctl took effect
  if (!stderr_path.empty()) {
    const int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(126);
  }
  execvp(binary.c_str(), argv.data());
  _exit(127);
}

RedisServer::RedisServer(RedisServerOptions options) : options_(std::move(options)) {
  char tmpl[] = "/tmp/streamq-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  for (int attempt = 0;; ++attempt) {
    port_ = options_.cluster_node ? free_cluster_port() : free_port();
    if (!options_.tls_dir.empty()) {
      do tls_port_ = free_port();
      while (tls_port_ == port_);
    }
    try {
      spawn();
      wait_ready();
      return;
    } catch (const std::exception&) {
      if (pid_ > 0) kill9();
      if (attempt == 2) throw;  // three ports tried: not a port race
    }
  }
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGTERM);
    // A server busy in a script (or stuck) does not act on SIGTERM: after 5 s, SIGKILL.
    int status = 0;
    const bool exited =
        wait_until([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, std::chrono::seconds(5));
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void RedisServer::spawn() {
  const char* env_binary = std::getenv("STREAMQ_REDIS_SERVER");
  const std::string binary = env_binary != nullptr ? env_binary : "redis-server";
  std::vector<std::string> args;
  if (!options_.sentinel_config.empty()) {
    const std::string conf = dir_ + "/sentinel.conf";
    if (!std::filesystem::exists(conf)) std::ofstream(conf) << options_.sentinel_config;
    args = {binary,   conf,         "--sentinel", "--port",    std::to_string(port_),
            "--bind", "127.0.0.1",  "--dir",      dir_,        "--daemonize",
            "no",     "--loglevel", "notice",     "--logfile", dir_ + "/sentinel.log"};
  } else {
    args = {binary,
            "--port",
            std::to_string(port_),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            dir_,
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            dir_ + "/redis.log",
            "--appendonly",
            options_.appendonly ? "yes" : "no",
            "--appendfsync",
            "always",
            "--maxmemory-policy",
            "noeviction"};
  }
  if (!options_.tls_dir.empty()) {
    const std::string& d = options_.tls_dir;
    const std::vector<std::string> tls = {"--tls-port",         std::to_string(tls_port_),
                                          "--tls-cert-file",    d + "/server.crt",
                                          "--tls-key-file",     d + "/server.key",
                                          "--tls-ca-cert-file", d + "/ca.crt",
                                          "--tls-auth-clients", options_.tls_auth_clients ? "yes" : "no"};
    args.insert(args.end(), tls.begin(), tls.end());
  }
  for (const auto& a : options_.extra) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = spawn_child(binary, argv);
  if (pid_ < 0) throw std::runtime_error("cannot start " + binary + " (is redis-server installed?)");
}

void RedisServer::wait_ready() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        throw std::runtime_error("cannot run redis-server (is it installed?)");
      }
      throw std::runtime_error("redis-server exited at start (port " + std::to_string(port_) + ")");
    }
    try {
      Client c(url());
      const detail::Reply r = c.cmd({"PING"});
      if (r.view().is_string() && r.view().str() == "PONG") return;
    } catch (const ReplyError& e) {
      if (e.prefix() == "NOAUTH") return;  // up, and wants a password
    } catch (const std::exception&) {
      // not listening yet (or still loading its AOF)
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("redis-server did not answer PING within 10 s");
}

void RedisServer::kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void RedisServer::restart() {
  kill9();
  spawn();
  wait_ready();
}

void RedisServer::restart(std::vector<std::string> extra) {
  options_.extra = std::move(extra);
  restart();
}

void RedisServer::pause() { kill(pid_, SIGSTOP); }
void RedisServer::resume() { kill(pid_, SIGCONT); }

SentinelTopology::SentinelTopology(std::string name)
    : name_(std::move(name)),
      first_({.extra = {"--repl-diskless-sync-delay", "0"}}),
      second_({.extra = {"--replicaof", "127.0.0.1", std::to_string(first_.port()),
                         "--repl-diskless-sync-delay", "0"}}) {
  // The sentinels find the replica in the master's INFO, which they read at once on start
  // and then every 10 s: start them once the replica is in sync.
  Client master(first_.url());
  const bool synced = wait_until([&] {
    master.cmd({"SET", "streamq-test:sentinel-ready", "1"}).view().check();
    return master.integer({"WAIT", "1", "100"}) == 1;
  });
  if (!synced) throw std::runtime_error("the replica did not sync with its master");
  const std::string conf = "sentinel monitor " + name_ + " 127.0.0.1 " + std::to_string(first_.port()) +
                           " 2\n"
                           "sentinel down-after-milliseconds " +
                           name_ + " 500\nsentinel failover-timeout " + name_ + " 3000\n";
  for (int i = 0; i < 3; ++i)
    sentinels_.push_back(std::make_unique<RedisServer>(RedisServerOptions{.sentinel_config = conf}));
}

bool SentinelTopology::wait_until_watched() {
  return wait_until(
      [&] {
        for (const auto& s : sentinels_) {
          Client c(s->url());
          const detail::Reply replicas = c.cmd({"SENTINEL", "replicas", name_});
          const detail::Reply peers = c.cmd({"SENTINEL", "sentinels", name_});
          if (replicas.view().check().size() != 1 || peers.view().check().size() != 2) return false;
          const std::string_view flags = replicas.view()[0].field("flags").str();
          if (flags.find("down") != std::string_view::npos ||
              flags.find("disconnected") != std::string_view::npos) {
            return false;
          }
        }
        return true;
      },
      std::chrono::seconds(20));
}

std::string SentinelTopology::sentinel_logs() const {
  std::string out;
  for (const auto& s : sentinels_) {
    std::ifstream in(s->dir() + "/sentinel.log");
    out += "--- sentinel " + std::to_string(s->port()) + ":\n";
    out.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

bool SentinelTopology::all_sentinels_name(int port) {
  for (const auto& s : sentinels_) {
    Client c(s->url());
    const detail::Reply r = c.cmd({"SENTINEL", "get-master-addr-by-name", name_});
    if (!r.view().is_array() || r.view().size() != 2 || r.view()[1].str() != std::to_string(port))
      return false;
  }
  return true;
}

std::string SentinelTopology::url(const std::string& query) const {
  std::string out = "redis+sentinel://";
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    out += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(sentinels_[i]->port());
  }
  return out + "/" + name_ + (query.empty() ? "" : "?" + query);
}

int SentinelTopology::master_port_by_sentinels() {
  for (const auto& s : sentinels_) {
    try {
      Client c(s->url());
      const detail::Reply r = c.cmd({"SENTINEL", "get-master-addr-by-name", name_});
      if (r.view().is_array() && r.view().size() == 2) return std::stoi(std::string(r.view()[1].str()));
    } catch (const std::exception&) {
      // that sentinel is down: ask the next
    }
  }
  return 0;
}

Client::Client(const std::string& url) : conn_(client_config(url)) {}

detail::Reply Client::cmd(std::initializer_list<std::string_view> args) {
  detail::Argv argv;
  for (auto a : args) argv.add(a);
  return conn_.command(argv);
}

detail::Reply Client::cmd(const std::vector<std::string>& args) {
  detail::Argv argv;
  for (const auto& a : args) argv.add(a);
  return conn_.command(argv);
}

std::int64_t Client::integer(std::initializer_list<std::string_view> args) {
  return cmd(args).view().integer();
}

std::string Client::redis_version() {
  const detail::Reply r = cmd({"INFO", "server"});
  const std::string_view info = r.view().check().str();
  constexpr std::string_view key = "redis_version:";
  const std::size_t at = info.find(key);
  if (at == std::string_view::npos) throw std::runtime_error("INFO server has no redis_version");
  const std::string_view rest = info.substr(at + key.size());
  return std::string(rest.substr(0, rest.find_first_of("\r\n")));
}

bool Client::redis_at_least(int major, int minor) {
  const std::string v = redis_version();
  const std::size_t dot = v.find('.');
  const int have_major = std::stoi(v);
  const int have_minor = dot == std::string::npos ? 0 : std::stoi(v.substr(dot + 1));
  return have_major > major || (have_major == major && have_minor >= minor);
}

std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> Client::xrange(
    const std::string& key) {
  const detail::Reply r = cmd({"XRANGE", key, "-", "+"});
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> out;
  const detail::ReplyView v = r.view().check();
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::vector<std::pair<std::string, std::string>> fields;
    const detail::ReplyView f = v[i][1];
    for (std::size_t k = 0; k + 1 < f.size(); k += 2) {
      fields.emplace_back(f[k].str(), f[k + 1].str());
    }
    out.emplace_back(std::string(v[i][0].str()), std::move(fields));
  }
  return out;
}

std::string Client::get(const std::vector<std::pair<std::string, std::string>>& fields,
                        std::string_view name) {
  for (const auto& [k, v] : fields) {
    if (k == name) return v;
  }
  return {};
}

bool succeeds_eventually(const std::function<void()>& call, std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        try {
          call();
          return true;
        } catch (const ConnectionError&) {
          return false;
        }
      },
      timeout);
}

bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (predicate()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling interval
  }
}

std::string unique_key(std::string_view suffix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string base = info != nullptr ? std::string(info->test_suite_name()) + "." + info->name() : "test";
  return "streamq-test:{" + base + "}:" + std::string(suffix);
}

namespace {

/// The value of `name` in INFO-style text (`name:value` lines), or "".
std::string info_field(std::string_view text, std::string_view name) {
  const std::string key = std::string(name) + ":";
  for (std::size_t at = 0; at < text.size();) {
    const auto end = text.find('\n', at);
    std::string_view line =
        text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.starts_with(key)) return std::string(line.substr(key.size()));
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  return {};
}

std::vector<std::string> split(std::string_view text, char by) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= text.size();) {
    const auto end = text.find(by, at);
    if (end == std::string_view::npos) {
      if (at < text.size()) out.emplace_back(text.substr(at));
      break;
    }
    if (end > at) out.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

constexpr int kSlots = 16384;

}  // namespace

ClusterTopology::ClusterTopology(int masters, int replicas_each) : masters_(masters) {
  const int total = masters * (1 + replicas_each);
  for (int i = 0; i < total; ++i) {
    nodes_.push_back(std::make_unique<RedisServer>(RedisServerOptions{
        .extra = {"--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                  "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"},
        .cluster_node = true}));
  }
  for (int m = 0; m < masters; ++m) {
    std::vector<std::string> args{"CLUSTER", "ADDSLOTS"};
    for (int s = m * kSlots / masters; s < (m + 1) * kSlots / masters; ++s) args.push_back(std::to_string(s));
    Client(node(m).url()).cmd(args).view().check();
  }
  Client first(node(0).url());
  for (int i = 1; i < total; ++i) {
    first.cmd({"CLUSTER", "MEET", "127.0.0.1", std::to_string(node(i).port())}).view().check();
  }
  const bool met = wait_until(
      [&] {
        for (int i = 0; i < total; ++i) {
          Client c(node(i).url());
          const detail::Reply r = c.cmd({"CLUSTER", "INFO"});
          if (info_field(r.view().str(), "cluster_known_nodes") != std::to_string(total)) return false;
        }
        return true;
      },
      std::chrono::seconds(20));
  if (!met) throw std::runtime_error("the cluster nodes did not meet within 20 s");
  for (int i = masters; i < total; ++i) {
    const std::string master = id((i - masters) / replicas_each);
    Client replica(node(i).url());
    const bool replicating = wait_until(
        [&] {
          return !replica.cmd({"CLUSTER", "REPLICATE", master}).view().is_error();
        },
        std::chrono::seconds(10));
    if (!replicating) throw std::runtime_error("CLUSTER REPLICATE was refused for 10 s");
  }
  if (!wait_until_ok()) throw std::runtime_error("the cluster did not reach cluster_state:ok within 20 s");
  for (int m = 0; m < masters && replicas_each > 0; ++m) {
    Client c(node(m).url());
    const bool synced = wait_until(
        [&] {
          const detail::Reply r = c.cmd({"INFO", "replication"});
          return info_field(r.view().str(), "connected_slaves") == std::to_string(replicas_each);
        },
        std::chrono::seconds(20));
    if (!synced) throw std::runtime_error("the replicas did not sync within 20 s");
  }
}

std::string ClusterTopology::url(const std::vector<int>& nodes) const {
  std::string out = "redis+cluster://";
  std::vector<int> which = nodes;
  if (which.empty()) {
    for (int m = 0; m < masters_; ++m) which.push_back(m);
  }
  for (std::size_t i = 0; i < which.size(); ++i) {
    out += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") +
           std::to_string(nodes_[static_cast<std::size_t>(which[i])]->port());
  }
  return out;
}

std::string ClusterTopology::id(int i) {
  Client c(node(i).url());
  return std::string(c.cmd({"CLUSTER", "MYID"}).view().str());
}

int ClusterTopology::owner_of(int slot) {
  for (int i = 0; i < size(); ++i) {
    if (node(i).pid() <= 0) continue;
    Client c(node(i).url());
    const detail::Reply r = c.cmd({"CLUSTER", "NODES"});
    for (const std::string& line : split(r.view().str(), '\n')) {
      const std::vector<std::string> f = split(line, ' ');
      if (f.size() < 8 || f[2].find("master") == std::string::npos ||
          f[2].find("fail") != std::string::npos) {
        continue;
      }
      for (std::size_t k = 8; k < f.size(); ++k) {
        if (f[k].starts_with('[')) continue;  // a slot being imported or migrated
        const auto dash = f[k].find('-');
        const int lo = std::stoi(f[k].substr(0, dash));
        const int hi = dash == std::string::npos ? lo : std::stoi(f[k].substr(dash + 1));
        if (slot < lo || slot > hi) continue;
        const std::string address = f[1].substr(0, f[1].find('@'));
        const int port = std::stoi(address.substr(address.rfind(':') + 1));
        for (int n = 0; n < size(); ++n) {
          if (node(n).port() == port) return n;
        }
      }
    }
    return -1;
  }
  return -1;
}

bool ClusterTopology::wait_until_ok(int slot, std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        int owner = -2;
        for (int i = 0; i < size(); ++i) {
          if (node(i).pid() <= 0) continue;
          Client c(node(i).url());
          const detail::Reply r = c.cmd({"CLUSTER", "INFO"});
          if (info_field(r.view().str(), "cluster_state") != "ok") return false;
        }
        if (slot < 0) return true;
        // Every live node names the same master for the slot.
        for (int i = 0; i < size(); ++i) {
          if (node(i).pid() <= 0) continue;
          Client c(node(i).url());
          const detail::Reply r = c.cmd({"CLUSTER", "SLOTS"});
          int here = -1;
          for (std::size_t k = 0; k < r.view().size(); ++k) {
            const detail::ReplyView range = r.view()[k];
            if (slot >= range[0].integer() && slot <= range[1].integer()) {
              here = static_cast<int>(range[2][1].integer());
            }
          }
          if (owner == -2) owner = here;
          if (here != owner || here < 0) return false;
        }
        return true;
      },
      timeout);
}

void ClusterTopology::migrate_slot(int slot, int to, int batch, const std::function<void()>& between) {
  const int from = owner_of(slot);
  if (from < 0) throw std::runtime_error("no node serves the slot");
  const std::string s = std::to_string(slot);
  Client src(node(from).url());
  Client dst(node(to).url());
  dst.cmd({"CLUSTER", "SETSLOT", s, "IMPORTING", id(from)}).view().check();
  src.cmd({"CLUSTER", "SETSLOT", s, "MIGRATING", id(to)}).view().check();
  while (true) {
    const detail::Reply keys = src.cmd({"CLUSTER", "GETKEYSINSLOT", s, std::to_string(batch)});
    if (keys.view().check().size() == 0) break;
    std::vector<std::string> args{"MIGRATE", "127.0.0.1", std::to_string(node(to).port()), "", "0",
                                  "5000",    "KEYS"};
    for (std::size_t k = 0; k < keys.view().size(); ++k) args.emplace_back(keys.view()[k].str());
    src.cmd(args).view().check();
    if (between) between();
  }
  const std::string owner = id(to);
  dst.cmd({"CLUSTER", "SETSLOT", s, "NODE", owner}).view().check();
  src.cmd({"CLUSTER", "SETSLOT", s, "NODE", owner}).view().check();
  for (int m = 0; m < size(); ++m) {
    if (m == from || m == to || node(m).pid() <= 0) continue;
    Client c(node(m).url());
    const detail::Reply r = c.cmd({"CLUSTER", "SETSLOT", s, "NODE", owner});
    (void)r;  // a replica refuses; the masters' gossip tells it
  }
}

}  // namespace streamq::test
