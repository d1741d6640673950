// SPDX-License-Identifier: MIT
// Inspector::doctor(): is this server set up to run streamq without losing tasks?
#include <chrono>
#include <cstdlib>
#include <map>

#include "inspector_impl.hpp"
#include "streamq/errors.hpp"

namespace streamq {

using detail::Argv;
using detail::Reply;
using detail::ReplyView;

namespace {

/// INFO's `key:value` lines.
std::map<std::string, std::string, std::less<>> info_fields(std::string_view text) {
  std::map<std::string, std::string, std::less<>> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto colon = line.find(':');
    if (line.empty() || line[0] == '#' || colon == std::string_view::npos) continue;
    out.emplace(std::string(line.substr(0, colon)), std::string(line.substr(colon + 1)));
  }
  return out;
}

std::string get(const std::map<std::string, std::string, std::less<>>& m, std::string_view key) {
  const auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

/// "7.0.15" -> 70015 (major * 10000 + minor * 100 + patch).
int version_number(const std::string& v) {
  int major = 0, minor = 0, patch = 0;
  std::sscanf(v.c_str(), "%d.%d.%d", &major, &minor, &patch);
  return major * 10000 + minor * 100 + patch;
}

std::string mib(std::int64_t bytes) { return std::to_string(bytes / (std::int64_t{1024} * 1024)) + " MiB"; }

/// One role's commands (what the ACL lines of docs/operations.md grant), as ACL DRYRUN argvs on `queue`.
struct RoleCheck {
  const char* role;
  std::vector<std::vector<std::string>> commands;
};

std::vector<RoleCheck> role_checks(const std::string& q, const std::string& group) {
  return {
      {"producer",
       {{"EVALSHA", "0000000000000000000000000000000000000000", "1", q},
        {"XADD", q, "*", "task_id", "x"},
        {"XLEN", q},
        {"ZADD", q + ":delayed", "0", "x"},
        {"ZREM", q + ":delayed", "x"},  // a debounced task's replacement
        {"HSET", detail::debounce_key(q, "x"), "member", "x"},
        {"HSET", detail::task_key(q, "x"), "state", "queued"},
        {"HSET", detail::flow_key(q, "x"), "body", "x"},
        {"SADD", detail::flow_key(q, "x") + ":pending", "x"},
        {"HINCRBY", detail::batch_key(q, "x"), "total", "1"},
        {"SCARD", detail::batch_key(q, "x") + ":pending"},
        {"XADD", detail::events_key(q), "*", "event", "x"},
        {"XREAD", "STREAMS", detail::events_key(q), "0-0"},
        {"HSET", detail::queue_keys(q).placing, "x", "x"},
        {"HDEL", detail::queue_keys(q).placing, "x"},
        {"SET", detail::placed_key(q, "x"), "1"},
        {"PEXPIRE", detail::placed_key(q, "x"), "1000"},
        {"TIME"}}},
      {"worker",
       {{"XREADGROUP", "GROUP", group, "c", "STREAMS", q, ">"},
        {"XACK", q, group, "0-1"},
        {"XDEL", q, "0-1"},
        {"XCLAIM", q, group, "c", "0", "0-1"},
        {"XPENDING", q, group},
        {"XINFO", "GROUPS", q},
        {"XADD", q + ":dlq", "*", "task_id", "x"},
        {"ZRANGEBYSCORE", q + ":delayed", "0", "1"},
        {"EXISTS", q + ":paused"},
        {"SET", detail::live_key(q, group, "c"), "x"},
        {"PEXPIRE", detail::orphan_key(q, "0-1"), "1000"},
        {"EXISTS", detail::cancel_key(q, "0-1")},
        {"DEL", detail::cancel_key(q, "0-1")},
        {"ZREM", detail::running_key(q, "t"), "x"},
        {"ZSCORE", detail::running_key(q), "x"},
        {"HINCRBY", detail::task_key(q, "x"), "attempts", "1"},
        {"HMGET", detail::task_key(q, "x"), "state", "attempts"},
        {"HDEL", detail::task_key(q, "x"), "progress"},
        {"HEXISTS", detail::task_key(q, "x"), "waited"},
        {"SISMEMBER", detail::flow_key(q, "x") + ":pending", "x"},
        {"SREM", detail::flow_key(q, "x") + ":pending", "x"},
        {"SCARD", detail::flow_key(q, "x") + ":pending"},
        {"HGETALL", detail::flow_key(q, "x") + ":results"},
        {"PTTL", detail::task_key(q, "x")},
        {"HSETNX", detail::task_key(q, "x"), "attempts", "0"},
        {"SREM", detail::batch_key(q, "x") + ":pending", "x"},
        {"XRANGE", detail::queue_keys(q).outbox, "-", "+"},
        {"XDEL", detail::queue_keys(q).outbox, "0-1"},
        {"XADD", detail::queue_keys(q).outbox, "*", "kind", "settle"},
        {"SET", detail::placed_key(q, "x"), "1"},
        {"HSCAN", detail::queue_keys(q).placing, "0"},
        {"HLEN", detail::queue_keys(q).placing},
        {"HDEL", detail::queue_keys(q).placing, "x"},
        {"CLIENT", "LIST", "ID", "1"},
        {"EVALSHA", "0000000000000000000000000000000000000000", "1", q},
        {"TIME"}}},
      {"stats",
       {{"XINFO", "STREAM", q},
        {"XINFO", "GROUPS", q},
        {"XLEN", q + ":dlq"},
        {"ZCARD", q + ":delayed"},
        {"XPENDING", q, group},
        {"TIME"}}},
      {"operator",
       {{"XRANGE", q + ":dlq", "-", "+"},
        {"XDEL", q + ":dlq", "0-1"},
        {"UNLINK", q + ":dlq"},
        {"SET", q + ":paused", "x"},
        {"HSET", detail::task_key(q, "x"), "state", "queued"},
        {"SREM", detail::flow_key(q, "x") + ":pending", "x"},
        {"HINCRBY", detail::batch_key(q, "x"), "done", "1"},
        {"EVALSHA", "0000000000000000000000000000000000000000", "1", q + ":dlq"},
        {"SCAN", "0"},
        {"CLIENT", "LIST", "ID", "1"},
        {"TIME"}}},
  };
}

}  // namespace

std::string_view to_string(Finding::Severity s) noexcept {
  switch (s) {
    case Finding::Severity::ok: return "ok";
    case Finding::Severity::info: return "info";
    case Finding::Severity::warning: return "warning";
    case Finding::Severity::danger: return "danger";
  }
  return "ok";
}

std::vector<Finding> Inspector::doctor(const std::string& queue, const std::string& user) {
  const std::lock_guard lock(impl_->calls);
  if (queue.empty()) throw ConfigError("queue must not be empty");
  // The ACL lines are per queue of one stream: a partitioned queue's first partition stands for all.
  const std::string checked = impl_->parts(queue).front();
  // On Redis Cluster every master is checked (each has its own configuration and ACL users), its
  // address before each of its findings.
  std::vector<std::pair<std::string, std::vector<Finding>>> nodes;
  impl_->connected().for_each_master([&](detail::Connection& node) {
    nodes.emplace_back(node.describe(), impl_->doctor_of(node, checked, user));
  });
  if (nodes.size() == 1) return std::move(nodes.front().second);
  std::vector<Finding> out;
  for (auto& [address, findings] : nodes) {
    for (Finding& f : findings) {
      f.message = address + ": " + f.message;
      out.push_back(std::move(f));
    }
  }
  return out;
}

std::vector<Finding> Inspector::Impl::doctor_of(detail::Connection& node, const std::string& queue,
                                                const std::string& user_to_check) {
  using S = Finding::Severity;
  std::vector<Finding> out;
  const auto add = [&](S s, std::string topic, std::string message) {
    out.push_back(Finding{s, std::move(topic), std::move(message)});
  };
  const auto run = [&](const Argv& argv) { return node.command(argv); };
  const Reply info_reply = run(Argv{"INFO"});
  const auto info = info_fields(info_reply.view().check().str());

  // Version: 6.2 is the minimum (XAUTOCLAIM, XPENDING IDLE); 7.0 adds the group lag, the deleted
  // ids of XAUTOCLAIM and consumer idle times that streamq reports.
  const std::string version = get(info, "redis_version");
  const std::string valkey = get(info, "valkey_version");
  const int v = version_number(version);
  const std::string server =
      valkey.empty() ? "Redis " + version : "Valkey " + valkey + " (Redis " + version + ")";
  if (v < 60200) {
    add(S::danger, "version", server + ": streamq needs Redis >= 6.2 (XAUTOCLAIM); upgrade the server");
  } else if (v < 70000) {
    add(S::info, "version",
        server +
            ": supported; Redis >= 7.0 adds the group lag, the ids of entries deleted while pending "
            "(dead-lettered as lost instead of waiting) and ACL DRYRUN for this check");
  } else {
    add(S::ok, "version", server + ": every streamq feature is available");
  }

  // Persistence: the AOF is what keeps acknowledged enqueues over a restart.
  const std::string aof = get(info, "aof_enabled");
  std::string fsync;
  const Reply fsync_reply = run(Argv{"CONFIG", "GET", "appendfsync"});
  if (const ReplyView f = fsync_reply.view(); f.is_array() && f.size() == 2) {
    fsync = std::string(f[1].str());
  } else {
    add(S::info, "persistence",
        "CONFIG GET appendfsync was refused (" + std::string(f.is_error() ? f.error() : "no reply") +
            "): the fsync policy could not be checked");
  }
  const std::string rdb_saves = get(info, "rdb_changes_since_last_save");
  if (aof != "1") {
    add(S::danger, "persistence",
        "appendonly is off: a restart loses every task enqueued since the last RDB snapshot (or all of "
        "them without one); set `appendonly yes` and `appendfsync everysec` (or `always`)");
  } else if (fsync == "no") {
    add(S::warning, "persistence",
        "appendonly yes with appendfsync no: the OS decides when the AOF reaches the disk, so a power "
        "loss can lose about 30 s of acknowledged enqueues; set `appendfsync everysec` (or `always`)");
  } else {
    add(S::ok, "persistence",
        "appendonly yes" + (fsync.empty() ? std::string() : ", appendfsync " + fsync) +
            (fsync == "always" ? ": no acknowledged enqueue is lost on power loss"
                               : ": a power loss can lose up to about 1 s of acknowledged enqueues"));
  }

  // Eviction would delete streams and delayed sets under memory pressure.
  const std::string policy = get(info, "maxmemory_policy");
  if (policy != "noeviction") {
    add(S::danger, "maxmemory-policy",
        "maxmemory-policy is " + policy +
            ": under memory pressure Redis deletes keys, whole queues "
            "included; set `maxmemory-policy noeviction` (enqueues then fail with OOM instead)");
  } else {
    add(S::ok, "maxmemory-policy", "noeviction: a full server refuses writes (OOM) and deletes nothing");
  }

  const std::int64_t used = std::atoll(get(info, "used_memory").c_str());
  const std::int64_t maxmemory = std::atoll(get(info, "maxmemory").c_str());
  const std::int64_t system = std::atoll(get(info, "total_system_memory").c_str());
  if (maxmemory > 0) {
    const double share = static_cast<double>(used) / static_cast<double>(maxmemory);
    add(share > 0.8 ? S::warning : S::ok, "memory",
        mib(used) + " used of maxmemory " + mib(maxmemory) + " (" +
            std::to_string(static_cast<int>(share * 100)) + "%)" +
            (share > 0.8 ? ": little headroom; enqueues fail with OOM when it is reached" : ""));
  } else {
    add(system > 0 && used > system / 2 ? S::warning : S::info, "memory",
        mib(used) + " used, no maxmemory set" +
            (system > 0 ? " (the machine has " + mib(system) + ")" : std::string()) +
            ": set maxmemory below the machine's memory, or the OS may kill the server when it runs out");
  }

  // Replicas: a single server is a single point of failure (Sentinel or Cluster need replicas).
  const std::string role = get(info, "role");
  const int replicas = std::atoi(get(info, "connected_slaves").c_str());
  if (role != "master") {
    add(S::warning, "replication", "this server is a " + role + ": streamq must write to the primary");
  } else if (replicas == 0) {
    add(S::warning, "replication",
        "no replica: losing this server's disk loses the queues; add a replica (and Sentinel for failover)");
  } else {
    add(S::ok, "replication", std::to_string(replicas) + " replica(s) connected");
  }

  // ACL: can this connection's user (or the one named) do what each role needs?
  const Reply who = user_to_check.empty() ? run(Argv{"ACL", "WHOAMI"}) : Reply();
  if ((who && who.view().is_error()) || v < 70000) {
    add(S::info, "acl",
        v < 70000
            ? "ACL DRYRUN needs Redis >= 7.0: the roles' permissions were not checked"
            : "ACL WHOAMI was refused (" + std::string(who.view().error()) + "): permissions not checked");
  } else {
    const std::string user = user_to_check.empty() ? std::string(who.view().str()) : user_to_check;
    for (const RoleCheck& rc : role_checks(queue, options.group)) {
      std::string denied;
      bool unknown = false;
      for (const auto& cmd : rc.commands) {
        Argv argv{"ACL", "DRYRUN", user};
        for (const std::string& a : cmd) argv.add(a);
        const Reply r = run(argv);
        if (r.view().is_error()) {
          add(S::info, "acl",
              "ACL DRYRUN was refused (" + std::string(r.view().error()) + "): permissions not checked");
          unknown = true;
          break;
        }
        if (r.view().str() != "OK") denied += (denied.empty() ? "" : ", ") + cmd[0];
      }
      if (unknown) break;
      if (denied.empty()) {
        add(S::ok, "acl", "user " + user + " may run the " + rc.role + " role's commands on " + queue);
      } else {
        add(S::info, "acl",
            "user " + user + " may not run " + denied + " on " + queue + ": it cannot be a " + rc.role +
                " there (docs/operations.md, \"ACL roles\", lists what each role needs)");
      }
    }
  }

  // Clock: delays and rate windows use the server's clock, but created_at and the stats' ages
  // compare with this machine's.
  const auto before = std::chrono::system_clock::now();
  const Reply time = run(Argv{"TIME"});
  const ReplyView tv = time.view().check();
  const std::int64_t server_now = tv[0].as_int() * 1000 + tv[1].as_int() / 1000;
  const auto after = std::chrono::system_clock::now();
  const auto ms = [](auto t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  const std::int64_t local = (ms(before) + ms(after)) / 2;
  const std::int64_t skew = server_now - local;
  const std::int64_t rtt = ms(after) - ms(before);
  if (std::llabs(skew) > 1000 + rtt) {
    add(S::warning, "clock",
        "the server's clock is " + std::to_string(skew) + " ms " + (skew > 0 ? "ahead of" : "behind") +
            " this machine's: due times use the server's, but created_at and task ages in logs do not; run "
            "NTP on both");
  } else {
    add(S::ok, "clock", "skew " + std::to_string(skew) + " ms (round trip " + std::to_string(rtt) + " ms)");
  }
  return out;
}

}  // namespace streamq
