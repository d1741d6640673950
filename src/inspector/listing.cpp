// SPDX-License-Identifier: MIT
// The Inspector's listings of tasks by state (queued, pending, delayed, dead), a page at a time,
// and their cursors.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>

#include "cursor.hpp"
#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "streamq/errors.hpp"
#include "wire/keys.hpp"

namespace streamq {

using detail::Argv;
using detail::bad_cursor;
using detail::check_queue;
using detail::fields_of;
using detail::from_hex;
using detail::is_entry_id;
using detail::kPriorities;
using detail::level_letter;
using detail::level_of_letter;
using detail::level_stream;
using detail::Reply;
using detail::ReplyView;
using detail::to_hex;

namespace {

constexpr std::size_t kMostPageCount = 10000;  // TaskQuery::count
/// Tenants a page of backlog tasks looks at, at least (a page of a larger count looks at as
/// many tenants as its count): what bounds a page's cost when most tenants have nothing of the
/// level listed.
constexpr std::size_t kBacklogTenantsPerPage = 1000;

/// A backlog's level in inspect_backlog.lua: 1 high, 2 normal, 3 low.
int backlog_level(Priority p) { return p == Priority::high ? 1 : p == Priority::low ? 3 : 2; }

}  // namespace

TaskPage Inspector::Impl::page(const detail::QueueKeys& keys, const TaskQuery& q) {
  switch (q.state) {
    case TaskState::queued:
    case TaskState::pending: return stream_page(keys, q);
    case TaskState::delayed: return delayed_tasks(keys, q);
    case TaskState::dead: return dead_tasks(keys, q);
    case TaskState::backlog: return backlog_tasks(keys, q);
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
  argvs.reserve(tasks.size());
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
      bodies.reserve(got.size());
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

Inspector::Impl::BacklogPage Inspector::Impl::backlog_page(const detail::QueueKeys& keys,
                                                           const std::optional<BacklogAt>& at,
                                                           int first_level, int last_level, std::size_t count,
                                                           std::size_t tenants, bool bytes) {
  const std::string ready = detail::tenants_ready_key(keys.stream);
  const std::string waiting = detail::tenants_waiting_key(keys.stream);
  Argv argv = scripts.begin(detail::ScriptId::inspect_backlog, 2);
  argv.add(ready).add(waiting).add(keys.stream);
  if (at) {
    argv.add(std::int64_t{at->set})
        .add(at->score)
        .add(at->tenant)
        .add(std::int64_t{at->level})
        .add(at->index);
  } else {
    argv.add(std::int64_t{1}).add("").add("").add(std::int64_t{first_level}).add(std::int64_t{0});
  }
  argv.add(std::int64_t{first_level}).add(std::int64_t{last_level});
  argv.add(static_cast<std::int64_t>(count)).add(static_cast<std::int64_t>(tenants)).add(bytes ? "1" : "");
  connected();
  const Reply r = scripts.call(detail::ScriptId::inspect_backlog, argv);
  const ReplyView v = r.view().check();
  BacklogPage out;
  if (const ReplyView where = v[0]; where.size() == 5) {
    out.next = BacklogAt{.set = static_cast<int>(where[0].as_int()),
                         .score = std::string(where[1].str()),
                         .tenant = std::string(where[2].str()),
                         .level = static_cast<int>(where[3].as_int()),
                         .index = where[4].as_int()};
  }
  out.tasks.reserve(v.size() - 1);
  for (std::size_t i = 1; i < v.size(); ++i) {
    const ReplyView item = v[i];
    Backlogged b;
    b.element = std::string(item[2].str());
    TaskInfo& t = b.info;
    t.state = TaskState::backlog;
    t.key = std::string(item[0].str());
    const std::int64_t level = item[1].as_int();
    t.level = level == 1 ? Priority::high : level == 3 ? Priority::low : Priority::normal;
    for (std::size_t j = 3; j + 1 < item.size(); j += 2)
      t.fields.emplace_back(item[j].str(), item[j + 1].str());
    t.id = std::string(t.task_id());
    out.tasks.push_back(std::move(b));
  }
  return out;
}

TaskPage Inspector::Impl::backlog_tasks(const detail::QueueKeys& keys, const TaskQuery& q) {
  // Cursor "b:<set: 1 ready, 2 waiting>:<level 1-4>:<index>:<score>:<tenant, hex>": where the
  // next page starts (BacklogAt).
  std::optional<BacklogAt> at;
  if (!q.cursor.empty()) {
    std::vector<std::string_view> parts;
    std::string_view rest(q.cursor);
    for (std::size_t colon; parts.size() < 5 && (colon = rest.find(':')) != std::string_view::npos;) {
      parts.push_back(rest.substr(0, colon));
      rest.remove_prefix(colon + 1);
    }
    parts.push_back(rest);
    const auto number = [](std::string_view s, std::int64_t& out) {
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      return !s.empty() && ec == std::errc() && end == s.data() + s.size() && out >= 0;
    };
    BacklogAt a;
    std::int64_t set = 0, level = 0;
    const auto tenant = parts.size() == 6 ? from_hex(parts[5]) : std::nullopt;
    bool ok = tenant && !tenant->empty() && parts[0] == "b" && number(parts[1], set) &&
              (set == 1 || set == 2) && number(parts[2], level) && level >= 1 && level <= 4 &&
              number(parts[3], a.index) && !parts[4].empty();
    if (ok) {
      a.score = std::string(parts[4]);
      char* end = nullptr;
      std::strtod(a.score.c_str(), &end);  // a pass, a due time, or inf (a paused tenant)
      ok = end == a.score.c_str() + a.score.size();
    }
    if (!ok) throw ConfigError(bad_cursor(q.cursor, q.state));
    a.set = static_cast<int>(set);
    a.level = static_cast<int>(level);
    a.tenant = *tenant;
    at = std::move(a);
  }
  const int first = q.level ? backlog_level(*q.level) : 1, last = q.level ? backlog_level(*q.level) : 3;
  BacklogPage got =
      backlog_page(keys, at, first, last, q.count, std::max(q.count, kBacklogTenantsPerPage), false);
  TaskPage page;
  for (Backlogged& b : got.tasks) page.tasks.push_back(std::move(b.info));
  if (got.next) {
    const BacklogAt& n = *got.next;
    page.next_cursor = "b:" + std::to_string(n.set) + ":" + std::to_string(n.level) + ":" +
                       std::to_string(n.index) + ":" + n.score + ":" + to_hex(n.tenant);
  }
  return page;
}

TaskPage Inspector::tasks(const std::string& queue, const TaskQuery& query) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  if (query.count < 1 || query.count > kMostPageCount) {
    throw ConfigError("count must be 1 to " + std::to_string(kMostPageCount) + " (got " +
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

}  // namespace streamq
