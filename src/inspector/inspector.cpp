// SPDX-License-Identifier: MIT
// The Inspector's reads: queues, tasks by state (every list pages), one task. The actions are
// in actions.cpp, doctor() in doctor.cpp.
#include "streamq/inspector.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
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
using detail::is_entry_id;
using detail::kPriorities;
using detail::level_stream;
using detail::Reply;
using detail::ReplyView;

namespace {

constexpr std::size_t kScanPage = 1000;    // entries per XRANGE page of a task_id search
constexpr std::size_t kMostCount = 10000;  // TaskQuery::count

/// The letter of a level in a cursor.
char level_letter(Priority p) { return p == Priority::high ? 'h' : p == Priority::low ? 'l' : 'n'; }

std::optional<Priority> level_of_letter(char c) {
  if (c == 'h') return Priority::high;
  if (c == 'n') return Priority::normal;
  if (c == 'l') return Priority::low;
  return std::nullopt;
}

/// A delayed member's bytes in a cursor (they are binary).
std::string to_hex(std::string_view bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

/// The partition index of `name` when it is a partition's stream `{<base>:<i>}` (i < 1024,
/// written without leading zeros), with its base; nullopt otherwise.
std::optional<std::pair<std::string, int>> partition_of(std::string_view name) {
  if (name.size() < 5 || name.front() != '{' || name.back() != '}') return std::nullopt;
  const std::string_view inner = name.substr(1, name.size() - 2);
  if (inner.find_first_of("{}") != std::string_view::npos) return std::nullopt;
  const auto colon = inner.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  const std::string_view digits = inner.substr(colon + 1);
  if (digits.empty() || digits.size() > 4 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  int i = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    i = i * 10 + (c - '0');
  }
  if (i >= detail::kMaxPartitions) return std::nullopt;
  return std::pair{std::string(inner.substr(0, colon)), i};
}

std::string bad_cursor(std::string_view cursor, TaskState state) {
  return "cursor \"" + std::string(cursor) + "\" is not a cursor of " + std::string(to_string(state)) +
         " tasks (pass back a TaskPage::next_cursor of the same state)";
}

}  // namespace

std::string_view to_string(TaskState s) noexcept {
  switch (s) {
    case TaskState::queued: return "queued";
    case TaskState::pending: return "pending";
    case TaskState::delayed: return "delayed";
    case TaskState::dead: return "dead";
  }
  return "queued";
}

std::optional<TaskState> parse_task_state(std::string_view s) noexcept {
  for (TaskState t : {TaskState::queued, TaskState::pending, TaskState::delayed, TaskState::dead}) {
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

std::vector<std::string> Inspector::Impl::parts(const std::string& queue) {
  const std::string base = detail::partition_base(queue);
  if (base.empty()) return {queue};
  // A key this ACL user may not read is one it cannot act on either: as good as absent.
  const auto exists = [](const detail::Reply& r) {
    const ReplyView v = r.view();
    if (v.is_error() && v.error().starts_with("NOPERM")) return false;
    return v.check().integer() > 0;
  };
  // First partition 0 (every partitioned queue has it once a worker ran: workers create every
  // partition's stream) with the queue's own keys, one by one (without a hash tag they may be
  // in different slots). Only when partition 0 exists, every other possible partition, each
  // in one EXISTS (its keys share its tag). A plain queue costs one round trip, and a user
  // whose ACL does not reach `{<base>:*}` one refusal, not a thousand.
  const detail::QueueKeys own = detail::queue_keys(queue);
  const detail::QueueKeys zero =
      detail::queue_keys(detail::partition_stream(base, detail::kMaxPartitions, 0));
  std::vector<Argv> argvs;
  for (const std::string* k : {&own.stream, &own.dlq, &own.delayed, &own.high, &own.low}) {
    argvs.push_back(Argv{"EXISTS", *k});
  }
  argvs.push_back(Argv{"EXISTS", zero.stream, zero.dlq, zero.delayed, zero.high, zero.low});
  const auto first = connected().pipeline(argvs);
  bool own_exists = false;
  for (std::size_t j = 0; j < 5; ++j) own_exists = own_exists || exists(first[j]);
  if (!exists(first[5])) return {queue};
  argvs.clear();
  std::vector<detail::QueueKeys> keys;  // the argvs' strings
  keys.reserve(detail::kMaxPartitions);
  for (int i = 1; i < detail::kMaxPartitions; ++i) {
    const detail::QueueKeys& k =
        keys.emplace_back(detail::queue_keys(detail::partition_stream(base, detail::kMaxPartitions, i)));
    argvs.push_back(Argv{"EXISTS", k.stream, k.dlq, k.delayed, k.high, k.low});
  }
  const auto rest = connected().pipeline(argvs);
  int last = 0;
  for (int i = 1; i < detail::kMaxPartitions; ++i) {
    if (exists(rest[static_cast<std::size_t>(i - 1)])) last = i;
  }
  std::vector<std::string> out;
  for (int i = 0; i <= last; ++i) out.push_back(detail::partition_stream(base, detail::kMaxPartitions, i));
  if (own_exists) out.push_back(queue);
  return out;
}

Inspector::Impl::Target Inspector::Impl::target(const std::vector<std::string>& parts,
                                                const std::string& id) {
  if (parts.size() > 1) {
    for (const std::string& part : parts) {  // (a task id may hold '/' itself)
      if (id.size() > part.size() + 1 && id.starts_with(part) && id[part.size()] == '/') {
        return {part, id.substr(part.size() + 1)};
      }
    }
  }
  return {std::string(), id};
}

std::vector<std::string> Inspector::Impl::parts_with_entry(const std::vector<std::string>& parts,
                                                           const std::string& id, bool dead) {
  std::vector<Argv> argvs;
  std::vector<detail::QueueKeys> keys;  // the argvs' strings
  keys.reserve(parts.size());
  for (const std::string& p : parts) {
    const detail::QueueKeys& k = keys.emplace_back(detail::queue_keys(p));
    if (dead) {
      argvs.push_back(Argv{"XRANGE", k.dlq, id, id});
    } else {
      for (Priority level : kPriorities) argvs.push_back(Argv{"XRANGE", level_stream(k, level), id, id});
    }
  }
  const auto r = connected().pipeline(argvs);
  const std::size_t per = dead ? 1 : 3;
  std::vector<std::string> found;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    for (std::size_t j = 0; j < per; ++j) {
      const ReplyView v = r[i * per + j].view();
      if (v.is_array() && v.size() > 0) {
        found.push_back(parts[i]);
        break;
      }
    }
  }
  return found;
}

void Inspector::Impl::check_unambiguous(const std::string& id, const std::vector<std::string>& found) {
  if (found.size() < 2) return;
  std::string names;
  for (const std::string& f : found) names += (names.empty() ? "" : ", ") + f;
  throw ConfigError("entry id " + id + " is in several partitions (" + names + "): give it as <partition>/" +
                    id);
}

TaskPage Inspector::Impl::page(const detail::QueueKeys& keys, const TaskQuery& q) {
  switch (q.state) {
    case TaskState::queued:
    case TaskState::pending: return stream_page(keys, q);
    case TaskState::delayed: return delayed_tasks(keys, q);
    case TaskState::dead: return dead_tasks(keys, q);
  }
  throw ConfigError("unknown task state");
}

std::vector<TaskInfo> Inspector::Impl::entries(ReplyView list, TaskState state, Priority level,
                                               const std::string& key) {
  std::vector<TaskInfo> out;
  out.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    TaskInfo t;
    t.state = state;
    t.level = level;
    t.key = key;
    t.id = std::string(list[i][0].str());
    t.fields = fields_of(list[i][1]);
    out.push_back(std::move(t));
  }
  return out;
}

std::string Inspector::Impl::last_delivered(const std::string& stream) {
  const Reply r = run(Argv{"XINFO", "GROUPS", stream});
  const ReplyView v = r.view();
  if (v.is_error()) {
    if (v.error().find("no such key") != std::string_view::npos) return {};
    v.check();
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i].field("name").str() == options.group) return std::string(v[i].field("last-delivered-id").str());
  }
  return {};  // no such group: nothing was delivered to it
}

void Inspector::Impl::add_pending_details(std::vector<TaskInfo>& tasks) {
  if (tasks.empty()) return;
  std::vector<Argv> argvs;
  for (const TaskInfo& t : tasks) argvs.push_back(Argv{"XPENDING", t.key, options.group, t.id, t.id, "1"});
  const auto replies = connected().pipeline(argvs);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const ReplyView v = replies[i].view();
    if (v.is_error() || v.size() == 0) continue;  // no group, or not pending: queued
    tasks[i].state = TaskState::pending;
    tasks[i].consumer = std::string(v[0][1].str());
    tasks[i].idle_ms = v[0][2].as_int();
    tasks[i].deliveries = v[0][3].as_int();
  }
}

TaskPage Inspector::Impl::stream_page(const detail::QueueKeys& keys, const TaskQuery& q) {
  // Cursor "<q|p>:<level letter>:<exclusive start>", e.g. "q:n:(1700000000000-3".
  const char tag = q.state == TaskState::queued ? 'q' : 'p';
  std::vector<Priority> levels;
  for (Priority p : kPriorities) {
    if (!q.level || *q.level == p) levels.push_back(p);
  }
  std::size_t first = 0;
  std::string start;
  if (!q.cursor.empty()) {
    const auto level = q.cursor.size() > 4 ? level_of_letter(q.cursor[2]) : std::nullopt;
    if (q.cursor[0] != tag || q.cursor[1] != ':' || !level || q.cursor[3] != ':') {
      throw ConfigError(bad_cursor(q.cursor, q.state));
    }
    const auto it = std::find(levels.begin(), levels.end(), *level);
    if (it == levels.end()) throw ConfigError(bad_cursor(q.cursor, q.state));
    first = static_cast<std::size_t>(it - levels.begin());
    start = q.cursor.substr(4);
  }
  TaskPage page;
  for (std::size_t li = first; li < levels.size(); ++li) {
    const std::string& stream = level_stream(keys, levels[li]);
    const std::size_t want = q.count - page.tasks.size();
    std::vector<TaskInfo> got;
    if (q.state == TaskState::queued) {
      if (start.empty()) {
        const std::string last = last_delivered(stream);
        start = last.empty() ? "-" : "(" + last;
      }
      const Reply r = run(Argv{"XRANGE", stream, start, "+", "COUNT", std::to_string(want)});
      got = entries(r.view().check(), TaskState::queued, levels[li], stream);
    } else {
      if (start.empty()) start = "-";
      const Reply r = run(Argv{"XPENDING", stream, options.group, start, "+", std::to_string(want)});
      const ReplyView v = r.view();
      if (v.is_error() && v.error().starts_with("NOGROUP")) {
        start.clear();
        continue;
      }
      v.check();
      std::vector<Argv> bodies;
      for (std::size_t i = 0; i < v.size(); ++i) {
        TaskInfo t;
        t.state = TaskState::pending;
        t.level = levels[li];
        t.key = stream;
        t.id = std::string(v[i][0].str());
        t.consumer = std::string(v[i][1].str());
        t.idle_ms = v[i][2].as_int();
        t.deliveries = v[i][3].as_int();
        got.push_back(std::move(t));
      }
      for (const TaskInfo& t : got) bodies.push_back(Argv{"XRANGE", stream, t.id, t.id});
      const auto replies = connected().pipeline(bodies);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const ReplyView b = replies[i].view().check();
        if (b.size() > 0) got[i].fields = fields_of(b[0][1]);
      }
    }
    const bool full = got.size() == want;
    for (TaskInfo& t : got) page.tasks.push_back(std::move(t));
    if (full) {
      // More may follow on this level (or on the next ones).
      page.next_cursor = std::string{tag, ':', level_letter(levels[li]), ':'} + "(" + page.tasks.back().id;
      return page;
    }
    start.clear();
  }
  return page;
}

std::vector<Inspector::Impl::Delayed> Inspector::Impl::delayed_page(const detail::QueueKeys& keys,
                                                                    std::string_view score,
                                                                    std::string_view after,
                                                                    std::size_t count) {
  Argv argv = scripts.begin(detail::ScriptId::inspect_delayed, 1);
  argv.add(keys.delayed).add(score).add(after).add(static_cast<std::int64_t>(count));
  connected();
  const Reply r = scripts.call(detail::ScriptId::inspect_delayed, argv);
  const ReplyView v = r.view().check();
  std::vector<Delayed> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const ReplyView item = v[i];
    Delayed d;
    d.member = std::string(item[0].str());
    d.score = std::string(item[1].str());
    TaskInfo& t = d.info;
    t.state = TaskState::delayed;
    t.key = keys.delayed;
    t.due_ms = static_cast<std::int64_t>(std::stod(d.score));
    if (item.size() >= 3) {
      const std::string_view dest = item[2].str();
      t.level = dest == keys.high ? Priority::high : dest == keys.low ? Priority::low : Priority::normal;
      for (std::size_t j = 3; j + 1 < item.size(); j += 2)
        t.fields.emplace_back(item[j].str(), item[j + 1].str());
      t.id = std::string(t.task_id());
    } else {
      t.fields.emplace_back("member", d.member);  // not streamq's: the forwarder dead-letters it
    }
    out.push_back(std::move(d));
  }
  return out;
}

TaskPage Inspector::Impl::delayed_tasks(const detail::QueueKeys& keys, const TaskQuery& q) {
  // Cursor "d:<score>:<the last member, hex>": the next page starts right after that member.
  std::string score = "-inf", after;
  if (!q.cursor.empty()) {
    const auto colon = q.cursor.find(':', 2);
    if (!q.cursor.starts_with("d:") || colon == std::string::npos || colon == 2 ||
        colon + 1 == q.cursor.size()) {
      throw ConfigError(bad_cursor(q.cursor, q.state));
    }
    score = q.cursor.substr(2, colon - 2);
    char* end = nullptr;
    std::strtod(score.c_str(), &end);  // Redis 7.2 writes large scores as 1.7e+12
    if (end != score.c_str() + score.size()) throw ConfigError(bad_cursor(q.cursor, q.state));
    const auto bytes = from_hex(std::string_view(q.cursor).substr(colon + 1));
    if (!bytes) throw ConfigError(bad_cursor(q.cursor, q.state));
    after = *bytes;
  }
  std::vector<Delayed> got = delayed_page(keys, score, after, q.count);
  TaskPage page;
  if (got.size() == q.count) page.next_cursor = "d:" + got.back().score + ":" + to_hex(got.back().member);
  for (Delayed& d : got) page.tasks.push_back(std::move(d.info));
  return page;
}

TaskPage Inspector::Impl::dead_tasks(const detail::QueueKeys& keys, const TaskQuery& q) {
  std::string start = "-";
  if (!q.cursor.empty()) {
    if (!q.cursor.starts_with("x:(") || !is_entry_id(std::string_view(q.cursor).substr(3))) {
      throw ConfigError(bad_cursor(q.cursor, q.state));
    }
    start = q.cursor.substr(2);
  }
  const Reply r = run(Argv{"XRANGE", keys.dlq, start, "+", "COUNT", std::to_string(q.count)});
  TaskPage page;
  page.tasks = entries(r.view().check(), TaskState::dead, Priority::normal, keys.dlq);
  if (page.tasks.size() == q.count) page.next_cursor = "x:(" + page.tasks.back().id;
  return page;
}

std::optional<Inspector::Impl::Delayed> Inspector::Impl::find_delayed(const detail::QueueKeys& keys,
                                                                      std::string_view task_id) {
  std::string score = "-inf", after;
  for (;;) {
    std::vector<Delayed> got = delayed_page(keys, score, after, kScanPage);
    for (Delayed& d : got) {
      if (!d.info.id.empty() && d.info.id == task_id) return std::move(d);
    }
    if (got.size() < kScanPage) return std::nullopt;
    score = got.back().score;
    after = got.back().member;
  }
}

std::optional<TaskInfo> Inspector::Impl::find(const detail::QueueKeys& keys, const std::string& id) {
  if (auto t = find_in_streams(keys, id)) return t;
  if (is_entry_id(id)) return std::nullopt;  // delayed tasks have no entry id
  if (auto d = find_delayed(keys, id)) return std::move(d->info);
  return std::nullopt;
}

std::optional<TaskInfo> Inspector::Impl::find_in_streams(const detail::QueueKeys& keys,
                                                         const std::string& id) {
  const bool by_entry = is_entry_id(id);
  for (Priority p : kPriorities) {
    const std::string& stream = level_stream(keys, p);
    if (by_entry) {
      const Reply r = run(Argv{"XRANGE", stream, id, id});
      std::vector<TaskInfo> got = entries(r.view().check(), TaskState::queued, p, stream);
      if (!got.empty()) {
        add_pending_details(got);
        return std::move(got.front());
      }
      continue;
    }
    std::string start = "-";
    for (;;) {
      const Reply r = run(Argv{"XRANGE", stream, start, "+", "COUNT", std::to_string(kScanPage)});
      std::vector<TaskInfo> got = entries(r.view().check(), TaskState::queued, p, stream);
      for (TaskInfo& t : got) {
        if (t.task_id() != id) continue;
        std::vector<TaskInfo> one;
        one.push_back(std::move(t));
        add_pending_details(one);
        return std::move(one.front());
      }
      if (got.size() < kScanPage) break;
      start = "(" + got.back().id;
    }
  }
  if (by_entry) {
    const Reply r = run(Argv{"XRANGE", keys.dlq, id, id});
    std::vector<TaskInfo> got = entries(r.view().check(), TaskState::dead, Priority::normal, keys.dlq);
    if (!got.empty()) return std::move(got.front());
    return std::nullopt;
  }
  std::string start = "-";
  for (;;) {
    const Reply r = run(Argv{"XRANGE", keys.dlq, start, "+", "COUNT", std::to_string(kScanPage)});
    std::vector<TaskInfo> got = entries(r.view().check(), TaskState::dead, Priority::normal, keys.dlq);
    for (TaskInfo& t : got) {
      if (t.task_id() == id) return std::move(t);
    }
    if (got.size() < kScanPage) break;
    start = "(" + got.back().id;
  }
  return std::nullopt;
}

namespace {

/// Adds `part`'s numbers to the partitioned queue `into`.
void add_part(QueueInfo& into, const QueueInfo& part) {
  for (Priority p : part.levels) {
    if (std::find(into.levels.begin(), into.levels.end(), p) == into.levels.end()) into.levels.push_back(p);
  }
  into.length += part.length;
  into.dlq_length += part.dlq_length;
  into.delayed_count += part.delayed_count;
  into.paused = into.paused && part.paused;
}

}  // namespace

/// Each partitioned queue's partitions (and its queue of one stream of the same name, if any) as
/// one QueueInfo, named as Inspector::parts() would resolve it; everything else as it is.
std::vector<QueueInfo> Inspector::Impl::group_partitions(std::vector<QueueInfo> found) {
  std::map<std::string, std::map<int, QueueInfo>> families;  // base -> index -> partition
  std::vector<QueueInfo> rest;
  for (QueueInfo& q : found) {
    if (const auto p = partition_of(q.name)) {
      families[p->first].emplace(p->second, std::move(q));
    } else {
      rest.push_back(std::move(q));
    }
  }
  for (auto& family : families) {
    const std::string& base = family.first;  // (clang 14 cannot capture a structured binding)
    std::map<int, QueueInfo>& members = family.second;
    if (!members.count(0)) {
      // Not a partitioned queue (as parts() sees it): queues that only look like partitions,
      // e.g. `{tenant:1}` and `{tenant:42}`, each a queue of its own.
      for (auto& [i, q] : members) rest.push_back(std::move(q));
      continue;
    }
    // The queue of one stream the partitions belong to (`orders` or `{orders}`), when it exists.
    auto own = std::find_if(rest.begin(), rest.end(), [&](const QueueInfo& q) {
      return q.partitions.empty() && detail::partition_base(q.name) == base;
    });
    QueueInfo total;
    total.name = own == rest.end() ? base : own->name;
    total.paused = true;
    const int last = members.rbegin()->first;
    for (int i = 0; i <= last; ++i)
      total.partitions.push_back(detail::partition_stream(base, detail::kMaxPartitions, i));
    for (const auto& [i, part] : members) add_part(total, part);
    if (own != rest.end()) {
      total.partitions.push_back(own->name);
      add_part(total, *own);
      rest.erase(own);
    }
    const auto rank = [](Priority p) {
      return std::find(kPriorities.begin(), kPriorities.end(), p) - kPriorities.begin();
    };
    std::sort(total.levels.begin(), total.levels.end(),
              [&](Priority a, Priority b) { return rank(a) < rank(b); });
    rest.push_back(std::move(total));
  }
  std::sort(rest.begin(), rest.end(), [](const QueueInfo& a, const QueueInfo& b) { return a.name < b.name; });
  return rest;
}

// ---- Inspector

Inspector::Inspector(InspectorOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Inspector::~Inspector() = default;
Inspector::Inspector(Inspector&&) noexcept = default;
Inspector& Inspector::operator=(Inspector&&) noexcept = default;

std::vector<QueueInfo> Inspector::queues() {
  // Candidates: every stream, named by its queue (a level's or a dead-letter stream names its
  // queue), and every `:delayed` sorted set (a queue with only delayed tasks has no stream yet).
  std::set<std::string> bases;
  const auto strip = [](std::string_view key) {
    for (std::string_view suffix : {":dlq", ":p:high", ":p:low", ":delayed"}) {
      if (key.size() > suffix.size() && key.ends_with(suffix))
        return std::string(key.substr(0, key.size() - suffix.size()));
    }
    return std::string(key);
  };
  // On Redis Cluster each master scans its own keys.
  impl_->connected().for_each_master([&](detail::Connection& node) {
    for (const auto& [type, match] : {std::pair{"stream", "*"}, std::pair{"zset", "*:delayed"}}) {
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
    constexpr std::size_t kPer = 9;
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
      if (high > 0) info.levels.push_back(Priority::high);
      if (is_stream) info.levels.push_back(Priority::normal);
      if (low > 0) info.levels.push_back(Priority::low);
      bool task_shaped = false, has_group = false;
      if (is_stream) {
        const ReplyView first = q[1].view();
        if (first.is_array() && first.size() > 0) {
          const Fields f = fields_of(first[0][1]);
          task_shaped = !field_of(f, "task_id").empty() && !field_of(f, "task_type").empty();
        }
        has_group = q[2].view().is_array() && q[2].view().size() > 0;
      }
      const bool derived = high > 0 || low > 0 || info.dlq_length > 0 || info.delayed_count > 0;
      if (task_shaped || derived || (is_stream && normal == 0 && has_group)) out.push_back(std::move(info));
    }
  }
  return Impl::group_partitions(std::move(out));
}

QueueStats Inspector::stats(const std::string& queue) {
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

TaskPage Inspector::tasks(const std::string& queue, const TaskQuery& query) {
  check_queue(queue);
  if (query.count < 1 || query.count > kMostCount) {
    throw ConfigError("count must be 1 to " + std::to_string(kMostCount) + " (got " +
                      std::to_string(query.count) + ")");
  }
  const std::vector<std::string> parts = impl_->parts(queue);
  if (parts.size() == 1) return impl_->page(detail::queue_keys(parts.front()), query);
  // A partitioned queue's cursor: "<partition index>/<that partition's cursor>".
  std::size_t k = 0;
  TaskQuery q = query;
  if (!query.cursor.empty()) {
    const auto slash = query.cursor.find('/');
    const std::string_view index = std::string_view(query.cursor).substr(0, slash);
    const auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), k);
    if (slash == std::string::npos || index.empty() || ec != std::errc() ||
        end != index.data() + index.size() || k >= parts.size()) {
      throw ConfigError(bad_cursor(query.cursor, query.state));
    }
    q.cursor = query.cursor.substr(slash + 1);
  }
  TaskPage page;
  for (; k < parts.size(); ++k) {
    q.count = query.count - page.tasks.size();
    TaskPage one = impl_->page(detail::queue_keys(parts[k]), q);
    for (TaskInfo& t : one.tasks) {
      t.partition = parts[k];
      page.tasks.push_back(std::move(t));
    }
    if (!one.next_cursor.empty()) {
      page.next_cursor = std::to_string(k) + "/" + one.next_cursor;
      return page;
    }
    q.cursor.clear();
  }
  return page;
}

std::optional<TaskInfo> Inspector::task(const std::string& queue, const std::string& id) {
  check_queue(queue);
  if (id.empty()) throw ConfigError("id must not be empty");
  const std::vector<std::string> parts = impl_->parts(queue);
  const Impl::Target t = Impl::target(parts, id);
  for (const std::string& part : parts) {
    if (!t.part.empty() && part != t.part) continue;
    if (auto found = impl_->find(detail::queue_keys(part), t.id)) {
      if (parts.size() > 1) found->partition = part;
      if (!found->field("retention").empty()) found->record = record(part, std::string(found->task_id()));
      return found;
    }
  }
  return std::nullopt;
}

std::int64_t Inspector::server_time_ms() { return impl_->server_ms(); }

}  // namespace streamq
