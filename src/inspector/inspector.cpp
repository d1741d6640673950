// SPDX-License-Identifier: MIT
// The Inspector: its state's set-up, the names of states and levels, queues(), stats(). Tasks
// are listed in listing.cpp, found in lookup.cpp; partitioned queues are in partitions.cpp, the
// actions in actions.cpp, the records in records.cpp, doctor() in doctor.cpp.
#include "streamq/inspector.hpp"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "stats/stats_read.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {

using detail::Argv;
using detail::check_queue;
using detail::field_of;
using detail::fields_of;
using detail::kPriorities;
using detail::Reply;
using detail::ReplyView;

std::string_view to_string(TaskState s) noexcept {
  switch (s) {
    case TaskState::queued: return "queued";
    case TaskState::pending: return "pending";
    case TaskState::delayed: return "delayed";
    case TaskState::dead: return "dead";
    case TaskState::backlog: return "backlog";
  }
  return "queued";
}

std::optional<TaskState> parse_task_state(std::string_view s) noexcept {
  for (TaskState t :
       {TaskState::queued, TaskState::pending, TaskState::delayed, TaskState::dead, TaskState::backlog}) {
    if (to_string(t) == s) return t;
  }
  return std::nullopt;
}

std::string_view to_string(Priority p) noexcept {
  return p == Priority::high ? "high" : p == Priority::low ? "low" : "normal";
}

std::optional<Priority> parse_priority(std::string_view s) noexcept {
  for (Priority p : kPriorities) {
    if (to_string(p) == s) return p;
  }
  return std::nullopt;
}

std::string_view TaskInfo::field(std::string_view name) const noexcept { return field_of(fields, name); }

std::string TaskInfo::to_json() const {
  nlohmann::ordered_json f = nlohmann::ordered_json::object();
  for (const auto& [k, v] : fields) f[k] = v;
  nlohmann::ordered_json j = {
      {"state", to_string(state)}, {"level", to_string(level)}, {"key", key}, {"id", id}, {"fields", f}};
  if (state == TaskState::pending) {
    j["consumer"] = consumer;
    j["idle_ms"] = idle_ms;
    j["deliveries"] = deliveries;
    j["holder"] = holder ? nlohmann::ordered_json{{"silent_ms", holder->silent_ms},
                                                  {"lease_ms", holder->lease_ms},
                                                  {"gone", holder->gone},
                                                  {"renewing", holder->renewing},
                                                  {"reclaim_in_ms", holder->reclaim_in_ms}}
                         : nlohmann::ordered_json(nullptr);
  }
  if (state == TaskState::delayed) j["due_ms"] = due_ms;
  if (!partition.empty()) j["partition"] = partition;
  if (record) j["record"] = nlohmann::ordered_json::parse(record->to_json());
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// ---- Impl

Inspector::Impl::Impl(InspectorOptions o)
    : options(std::move(o)),
      conn(detail::make_connection_config(options.connection, "inspector")),
      scripts(conn) {
  if (options.group.empty()) throw ConfigError("group must not be empty");
}

detail::Connection& Inspector::Impl::connected() {
  conn.connect_with_backoff();
  return conn;
}

Reply Inspector::Impl::run(const Argv& argv) { return connected().command(argv); }

std::int64_t Inspector::Impl::server_ms() {
  const Reply r = run(Argv{"TIME"});
  const ReplyView t = r.view().check();
  return t[0].as_int() * 1000 + t[1].as_int() / 1000;
}

// ---- Inspector

Inspector::Inspector(InspectorOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Inspector::~Inspector() = default;
Inspector::Inspector(Inspector&&) noexcept = default;
Inspector& Inspector::operator=(Inspector&&) noexcept = default;

std::vector<QueueInfo> Inspector::queues() {
  const std::lock_guard lock(impl_->calls);
  // Candidates: every stream, named by its queue (a level's or a dead-letter stream names its
  // queue), every `:delayed` sorted set (a queue with only delayed tasks has no stream yet) and
  // the sets of its tenants with work.
  std::set<std::string> bases;
  const auto strip = [](std::string_view key) {
    // (A queue whose tasks all wait in its tenants' backlogs has no stream: its tenants with work
    // are in its `:tenants:ready` or `:tenants:waiting` set, docs/tenants.md.)
    for (std::string_view suffix :
         {":dlq", ":p:high", ":p:low", ":delayed", ":tenants:ready", ":tenants:waiting"}) {
      if (key.size() > suffix.size() && key.ends_with(suffix))
        return std::string(key.substr(0, key.size() - suffix.size()));
    }
    return std::string(key);
  };
  // On Redis Cluster each master scans its own keys.
  impl_->connected().for_each_master([&](detail::Connection& node) {
    for (const auto& [type, match] :
         {std::pair{"stream", "*"}, std::pair{"zset", "*:delayed"}, std::pair{"zset", "*:tenants:ready"},
          std::pair{"zset", "*:tenants:waiting"}}) {
      std::string cursor = "0";
      do {
        const Reply r = node.command(Argv{"SCAN", cursor, "MATCH", match, "COUNT", "1000", "TYPE", type});
        const ReplyView v = r.view().check();
        cursor = std::string(v[0].str());
        for (std::size_t i = 0; i < v[1].size(); ++i) bases.insert(strip(v[1][i].str()));
      } while (cursor != "0");
    }
  });
  std::vector<QueueInfo> out;
  std::vector<std::string> names(bases.begin(), bases.end());
  for (std::size_t start = 0; start < names.size(); start += 100) {
    const std::size_t n = std::min<std::size_t>(100, names.size() - start);
    std::vector<Argv> argvs;
    std::vector<detail::QueueKeys> keys;
    for (std::size_t i = 0; i < n; ++i) keys.push_back(detail::queue_keys(names[start + i]));
    constexpr std::size_t kPer = 13;
    for (const detail::QueueKeys& k : keys) {
      argvs.push_back(Argv{"TYPE", k.stream});
      argvs.push_back(Argv{"XRANGE", k.stream, "-", "+", "COUNT", "1"});
      argvs.push_back(Argv{"XINFO", "GROUPS", k.stream});
      argvs.push_back(Argv{"XLEN", k.stream});
      argvs.push_back(Argv{"XLEN", k.high});
      argvs.push_back(Argv{"XLEN", k.low});
      argvs.push_back(Argv{"XLEN", k.dlq});
      argvs.push_back(Argv{"ZCARD", k.delayed});
      argvs.push_back(Argv{"EXISTS", k.paused});
      argvs.push_back(Argv{"EXISTS", k.high});  // (a level's stream may exist empty: a worker made it)
      argvs.push_back(Argv{"EXISTS", k.low});
      argvs.emplace_back(Argv{"ZCARD"}).add_copy(detail::tenants_ready_key(k.stream));
      argvs.emplace_back(Argv{"ZCARD"}).add_copy(detail::tenants_waiting_key(k.stream));
    }
    const auto r = impl_->connected().pipeline(argvs);
    for (std::size_t i = 0; i < n; ++i) {
      const detail::Reply* q = &r[i * kPer];
      const auto count = [&](std::size_t j) {
        const ReplyView v = q[j].view();
        return v.is_integer() ? v.integer() : 0;  // WRONGTYPE: someone else's key of that name
      };
      const bool is_stream = q[0].view().is_string() && q[0].view().str() == "stream";
      QueueInfo info;
      info.name = names[start + i];
      info.dlq = keys[i].dlq;
      info.delayed = keys[i].delayed;
      const std::int64_t high = count(4), normal = is_stream ? count(3) : 0, low = count(5);
      info.length = high + normal + low;
      info.dlq_length = count(6);
      info.delayed_count = count(7);
      info.paused = count(8) == 1;
      if (high > 0 || count(9) == 1) info.levels.push_back(Priority::high);
      if (is_stream) info.levels.push_back(Priority::normal);
      if (low > 0 || count(10) == 1) info.levels.push_back(Priority::low);
      bool task_shaped = false, has_group = false;
      if (is_stream) {
        const ReplyView first = q[1].view();
        if (first.is_array() && first.size() > 0) {
          const Fields f = fields_of(first[0][1]);
          task_shaped = !field_of(f, "task_id").empty() && !field_of(f, "task_type").empty();
        }
        has_group = q[2].view().is_array() && q[2].view().size() > 0;
      }
      const bool tenants = count(11) > 0 || count(12) > 0;
      const bool derived = high > 0 || low > 0 || info.dlq_length > 0 || info.delayed_count > 0 || tenants;
      if (task_shaped || derived || (is_stream && normal == 0 && has_group)) out.push_back(std::move(info));
    }
  }
  return Impl::group_partitions(std::move(out));
}

QueueStats Inspector::stats(const std::string& queue) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  const std::vector<std::string> parts = impl_->parts(queue);
  StatsOptions o;
  std::vector<QueueStats> each;
  for (const std::string& part : parts) {
    o.stream = part;
    each.push_back(detail::read_queue_stats(impl_->connected(), o));
  }
  if (each.size() == 1) return std::move(each.front());
  return detail::sum_partitions(queue, std::move(each));
}

std::int64_t Inspector::server_time_ms() {
  const std::lock_guard lock(impl_->calls);
  return impl_->server_ms();
}

}  // namespace streamq
