// SPDX-License-Identifier: MIT
// The Inspector finding one task by entry id or task_id: in the level streams, the dead-letter
// stream, then the delayed set and the tenants' backlogs.
#include <algorithm>

#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "streamq/errors.hpp"
#include "wire/keys.hpp"
#include "wire/name_holder.hpp"

namespace streamq {

using detail::Argv;
using detail::check_queue;
using detail::is_entry_id;
using detail::kPriorities;
using detail::level_stream;
using detail::Reply;

namespace {

constexpr std::size_t kScanPage = 1000;  // entries (and tenants) per page of a task_id search

}  // namespace

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

std::optional<Inspector::Impl::Backlogged> Inspector::Impl::find_backlog(const detail::QueueKeys& keys,
                                                                         std::string_view task_id) {
  std::optional<BacklogAt> at;
  for (;;) {
    BacklogPage got = backlog_page(keys, at, 1, 3, kScanPage, kScanPage, true);
    for (Backlogged& b : got.tasks) {
      if (!b.info.id.empty() && b.info.id == task_id) return std::move(b);
    }
    if (!got.next) return std::nullopt;
    at = std::move(got.next);
  }
}

std::optional<TaskInfo> Inspector::Impl::find(const detail::QueueKeys& keys, const std::string& id) {
  if (auto t = find_in_streams(keys, id)) return t;
  if (is_entry_id(id)) return std::nullopt;  // delayed tasks and a backlog's have no entry id
  if (auto d = find_delayed(keys, id)) return std::move(d->info);
  if (auto b = find_backlog(keys, id)) return std::move(b->info);
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

void Inspector::Impl::add_holder(const std::string& queue, TaskInfo& t) {
  // The name lock holds "<client id> <token> <ms of its last renewal>" (consumer/name_lock.hpp)
  // and lives claim_min_idle after that renewal.
  const std::string key = detail::live_key(queue, options.group, t.consumer);
  std::vector<Argv> argvs;
  argvs.push_back(Argv{"GET", key});
  argvs.push_back(Argv{"PTTL", key});
  argvs.push_back(Argv{"TIME"});
  const std::vector<Reply> r = connected().pipeline(argvs);
  const detail::ReplyView value = r[0].view(), ttl = r[1].view(), time = r[2].view().check();
  if (!value.is_string() || !ttl.is_integer() || ttl.integer() < 0)
    return;  // no name lock (or not streamq's)
  const std::optional<detail::NameHolder> holder = detail::parse_name_holder(value.str());
  if (!holder) return;
  const std::int64_t now = time[0].as_int() * 1000 + time[1].as_int() / 1000;
  // (The keys' server is the one the last command went to.)
  const detail::HolderLook look = detail::look_at_holders(connected(), {*holder}, now).front();
  TaskInfo::Holder h;
  h.silent_ms = std::max<std::int64_t>(0, now - holder->written_ms);
  h.lease_ms = ttl.integer() + h.silent_ms;
  h.gone = look.state == detail::HolderLook::State::gone;
  h.renewing = !h.gone && h.silent_ms * 3 < h.lease_ms;
  h.reclaim_in_ms = std::max<std::int64_t>(0, h.lease_ms - t.idle_ms);
  t.holder = h;
}

std::optional<TaskInfo> Inspector::task(const std::string& queue, const std::string& id) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  if (id.empty()) throw ConfigError("id must not be empty");
  const std::vector<std::string> parts = impl_->parts(queue);
  const Impl::Target t = Impl::target(parts, id);
  for (const std::string& part : parts) {
    if (!t.part.empty() && part != t.part) continue;
    if (auto found = impl_->find(detail::queue_keys(part), t.id)) {
      if (parts.size() > 1) found->partition = part;
      // (A consumer's name lock is in its first partition's keys.)
      if (found->state == TaskState::pending) impl_->add_holder(parts.front(), *found);
      if (!found->field("retention").empty()) found->record = record(part, std::string(found->task_id()));
      return found;
    }
  }
  return std::nullopt;
}

}  // namespace streamq
