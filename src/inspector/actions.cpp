// SPDX-License-Identifier: MIT
// The Inspector's actions: replay, delete and purge dead letters, run a delayed task now,
// cancel, pause and resume. Each is one script or one command per batch, so a worker running
// meanwhile never sees a task in two places.
#include <algorithm>
#include <map>

#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"
#include "wire/record.hpp"

namespace streamq {

using detail::Argv;
using detail::check_queue;
using detail::fields_of;
using detail::is_entry_id;
using detail::kPriorities;
using detail::level_stream;
using detail::matches;
using detail::Reply;
using detail::ReplyView;

namespace {

constexpr std::size_t kBatch = 500;      // ids per replay script call, XDEL, ...
constexpr std::size_t kMostIds = 10000;  // DeadLetterFilter::ids

}  // namespace

template <typename Act>
ActionResult Inspector::Impl::each_dead(const detail::QueueKeys& keys, const DeadLetterFilter& filter,
                                        const ProgressCallback& progress, Act act) {
  if (filter.ids.size() > kMostIds) {
    throw ConfigError("at most " + std::to_string(kMostIds) + " dead-letter ids per call (got " +
                      std::to_string(filter.ids.size()) + ")");
  }
  for (const std::string& id : filter.ids) {
    if (!is_entry_id(id)) throw ConfigError("\"" + id + "\" is not a dead-letter entry id (<ms>-<seq>)");
  }
  ActionResult result;
  Progress at;
  const auto report = [&](std::size_t scanned) {
    at.scanned += static_cast<std::int64_t>(scanned);
    at.done = result.done;
    if (progress && !progress(at)) {
      result.finished = false;
      return false;
    }
    return true;
  };
  if (!filter.ids.empty()) {
    at.total = static_cast<std::int64_t>(filter.ids.size());
    for (std::size_t i = 0; i < filter.ids.size(); i += kBatch) {
      const std::size_t n = std::min(kBatch, filter.ids.size() - i);
      std::vector<std::string> ids(filter.ids.begin() + static_cast<std::ptrdiff_t>(i),
                                   filter.ids.begin() + static_cast<std::ptrdiff_t>(i + n));
      act(ids, result);
      if (!report(n)) return result;
    }
    return result;
  }
  // The whole stream, up to its newest entry now: what fails again meanwhile is not met twice.
  const Reply newest = run(Argv{"XREVRANGE", keys.dlq, "+", "-", "COUNT", "1"});
  const ReplyView nv = newest.view().check();
  if (nv.size() == 0) return result;
  const std::string end(nv[0][0].str());
  at.total = run(Argv{"XLEN", keys.dlq}).view().check().integer();
  std::string start = "-";
  for (;;) {
    const Reply r = run(Argv{"XRANGE", keys.dlq, start, end, "COUNT", std::to_string(kBatch)});
    const ReplyView page = r.view().check();
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < page.size(); ++i) {
      if (matches(fields_of(page[i][1]), filter)) ids.emplace_back(page[i][0].str());
    }
    if (!ids.empty()) act(ids, result);
    if (!report(page.size())) return result;
    if (page.size() < kBatch) return result;
    // (Built by append: g++ 12 at -O3 warns falsely, -Wrestrict, about "(" + std::string&&.)
    start.assign(1, '(');
    start.append(page[page.size() - 1][0].str());
  }
}

template <typename Act>
ActionResult Inspector::Impl::on_dead_of_parts(const std::string& queue, const DeadLetterFilter& filter,
                                               const ProgressCallback& progress, Act act) {
  const std::vector<std::string> ps = parts(queue);
  if (ps.size() == 1) return act(detail::queue_keys(ps.front()), filter, progress);
  if (filter.ids.size() > kMostIds) {
    throw ConfigError("at most " + std::to_string(kMostIds) + " dead-letter ids per call (got " +
                      std::to_string(filter.ids.size()) + ")");
  }
  // Each id to the partition whose dead-letter stream has it (named, or looked up in each).
  std::map<std::string, std::vector<std::string>> ids_of;
  ActionResult sum;
  Progress base;
  if (!filter.ids.empty()) {
    for (const std::string& given : filter.ids) {
      const Target t = target(ps, given);
      if (!is_entry_id(t.id)) {
        throw ConfigError("\"" + given +
                          "\" is not a dead-letter entry id (<ms>-<seq>, or <partition>/<ms>-<seq>)");
      }
      if (!t.part.empty()) {
        ids_of[t.part].push_back(t.id);
        continue;
      }
      const std::vector<std::string> found = parts_with_entry(ps, t.id, true);
      check_unambiguous(t.id, found);
      if (found.empty()) {
        ++sum.skipped;  // gone meanwhile: in no partition
        ++base.scanned;
      } else {
        ids_of[found.front()].push_back(t.id);
      }
    }
    base.total = static_cast<std::int64_t>(filter.ids.size());
  } else {
    std::vector<std::string> dlqs;  // the argvs' strings
    dlqs.reserve(ps.size());
    std::vector<Argv> lens;
    lens.reserve(ps.size());
    for (const std::string& p : ps)
      lens.push_back(Argv{"XLEN", dlqs.emplace_back(detail::queue_keys(p).dlq)});
    for (const Reply& r : connected().pipeline(lens)) base.total += r.view().check().integer();
  }
  for (const std::string& p : ps) {
    DeadLetterFilter f = filter;
    if (!filter.ids.empty()) {
      const auto it = ids_of.find(p);
      if (it == ids_of.end()) continue;
      f.ids = it->second;
    }
    std::int64_t scanned = 0;
    const ProgressCallback each = [&](const Progress& at) {
      scanned = at.scanned;
      return !progress || progress(Progress{base.done + at.done, base.scanned + at.scanned, base.total});
    };
    const ActionResult r = act(detail::queue_keys(p), f, each);
    sum.done += r.done;
    sum.skipped += r.skipped;
    base.done += r.done;
    base.scanned += scanned;
    if (!r.finished) {
      sum.finished = false;
      break;
    }
  }
  return sum;
}

ActionResult Inspector::replay(const std::string& queue, const ReplayOptions& options) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  return impl_->on_dead_of_parts(
      queue, options.filter, options.progress,
      [&](const detail::QueueKeys& keys, const DeadLetterFilter& f, const ProgressCallback& p) {
        ReplayOptions one = options;
        one.filter = f;
        one.progress = p;
        return impl_->replay_one(keys, one);
      });
}

ActionResult Inspector::Impl::replay_one(const detail::QueueKeys& keys, const ReplayOptions& options) {
  const std::string& dest = detail::priority_stream(keys, options.priority);
  const std::string replayed_at = detail::format_timestamp(std::chrono::system_clock::now());
  return each_dead(keys, options.filter, options.progress,
                   [&](const std::vector<std::string>& ids, ActionResult& result) {
                     Argv argv = scripts.begin(detail::ScriptId::replay, 5);
                     argv.add(keys.dlq).add(dest).add(keys.high).add(keys.stream).add(keys.low);
                     argv.add(replayed_at);
                     argv.add(options.filter.task_type).add(options.filter.reason);
                     for (const std::string& id : ids) argv.add(id);
                     connected();
                     const Reply r = scripts.call(detail::ScriptId::replay, argv);
                     const ReplyView v = r.view().check();
                     for (std::size_t i = 0; i < v.size(); ++i) {
                       if (v[i].is_string()) {
                         ++result.done;
                       } else {
                         ++result.skipped;
                       }
                     }
                   });
}

ActionResult Inspector::delete_dead(const std::string& queue, const DeadLetterFilter& filter,
                                    const ProgressCallback& progress) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  return impl_->on_dead_of_parts(queue, filter, progress,
                                 [&](const detail::QueueKeys& keys, const DeadLetterFilter& f,
                                     const ProgressCallback& p) { return impl_->delete_one(keys, f, p); });
}

ActionResult Inspector::Impl::delete_one(const detail::QueueKeys& keys, const DeadLetterFilter& filter,
                                         const ProgressCallback& progress) {
  const bool by_fields = !filter.task_type.empty() || !filter.reason.empty();
  return each_dead(keys, filter, progress, [&](const std::vector<std::string>& ids, ActionResult& result) {
    std::vector<std::string> chosen;
    if (by_fields && !filter.ids.empty()) {
      // Ids named and a filter: delete those that match (dead letters never change,
      // so the read and the XDEL cannot disagree about a match).
      std::vector<Argv> reads;
      reads.reserve(ids.size());
      for (const std::string& id : ids) reads.push_back(Argv{"XRANGE", keys.dlq, id, id});
      const auto replies = connected().pipeline(reads);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const ReplyView v = replies[i].view().check();
        if (v.size() > 0 && matches(fields_of(v[0][1]), filter)) {
          chosen.push_back(ids[i]);
        } else {
          ++result.skipped;
        }
      }
    } else {
      chosen = ids;
    }
    if (chosen.empty()) return;
    const std::int64_t n = forget(keys, chosen, false);
    result.done += n;
    result.skipped += static_cast<std::int64_t>(chosen.size()) - n;
  });
}

std::int64_t Inspector::Impl::forget(const detail::QueueKeys& keys, const std::vector<std::string>& ids,
                                     bool drop_empty) {
  Argv argv = scripts.begin(detail::ScriptId::forget, 1);
  argv.add(keys.dlq).add(keys.stream).add(drop_empty ? "1" : "0");
  for (const std::string& id : ids) argv.add(id);
  connected();
  return scripts.call(detail::ScriptId::forget, argv).view().check().integer();
}

std::int64_t Inspector::purge_dead(const std::string& queue) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  std::int64_t n = 0;
  for (const std::string& part : impl_->parts(queue)) n += impl_->purge_one(detail::queue_keys(part));
  return n;
}

std::int64_t Inspector::Impl::purge_one(const detail::QueueKeys& keys) {
  // Every dead letter there now, in batches of 500, each with its tracked task's record (see
  // forget): a record kept "as long as its dead letter" goes with it.
  return each_dead(keys, {}, {},
                   [&](const std::vector<std::string>& ids, ActionResult& result) {
                     result.done += forget(keys, ids, true);
                   })
      .done;
}

std::optional<std::string> Inspector::run_now(const std::string& queue, const std::string& task_id) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  if (task_id.empty()) throw ConfigError("task_id must not be empty");
  const std::vector<std::string> parts = impl_->parts(queue);
  const Impl::Target t = Impl::target(parts, task_id);
  for (const std::string& part : parts) {
    if (!t.part.empty() && part != t.part) continue;
    if (auto id = impl_->run_now_one(detail::queue_keys(part), t.id)) return id;
  }
  return std::nullopt;
}

std::optional<std::string> Inspector::Impl::run_now_one(const detail::QueueKeys& keys,
                                                        const std::string& task_id) {
  const auto found = find_delayed(keys, task_id);
  if (!found) return std::nullopt;
  Argv argv = scripts.begin(detail::ScriptId::run_delayed, 4);
  argv.add(keys.delayed).add(keys.stream).add(keys.high).add(keys.low).add(found->member);
  connected();
  const Reply r = scripts.call(detail::ScriptId::run_delayed, argv);
  const ReplyView v = r.view().check();
  if (v.is_nil()) return std::nullopt;  // a forwarder moved it meanwhile
  return std::string(v.str());
}

CancelOutcome Inspector::cancel(const std::string& queue, const std::string& id) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  if (id.empty()) throw ConfigError("id must not be empty");
  const std::vector<std::string> parts = impl_->parts(queue);
  const Impl::Target t = Impl::target(parts, id);
  if (t.part.empty() && parts.size() > 1 && is_entry_id(t.id)) {
    Impl::check_unambiguous(t.id, impl_->parts_with_entry(parts, t.id, false));
  }
  return impl_->cancel_in(parts, t.part, t.id);
}

CancelOutcome Inspector::Impl::cancel_in(const std::vector<std::string>& parts, const std::string& part,
                                         const std::string& id) {
  for (const std::string& p : parts) {
    if (!part.empty() && p != part) continue;
    const CancelOutcome c = cancel_one(detail::queue_keys(p), id, parts);
    if (c != CancelOutcome::missing) return c;
  }
  return CancelOutcome::missing;
}

/// How long the cancel request of a running task waits for its holder (cancel.lua): its holder
/// sees it within a heartbeat, or the consumer that reclaims the entry does after its holder
/// died; a task that finished meanwhile leaves it to expire.
namespace {
constexpr std::int64_t kCancelRequestMs = std::int64_t{24} * 3600 * 1000;
}  // namespace

CancelOutcome Inspector::Impl::cancel_one(const detail::QueueKeys& keys, const std::string& id,
                                          const std::vector<std::string>& parts) {
  const auto cancel_entry = [&](const std::string& stream, const std::string& entry_id) {
    Argv argv = scripts.begin(detail::ScriptId::cancel, 1);
    argv.add(stream).add(options.group).add(entry_id).add(keys.stream).add(kCancelRequestMs);
    connected();
    const Reply r = scripts.call(detail::ScriptId::cancel, argv);
    const ReplyView v = r.view().check();
    const std::string_view what = v[0].str();
    if (what == "nogroup") {
      std::string groups;
      for (std::size_t i = 1; i < v.size(); ++i) groups += (i > 1 ? ", " : "") + std::string(v[i].str());
      throw ConfigError("stream \"" + stream + "\" has no consumer group \"" + options.group +
                        "\" (its groups: " + groups +
                        "): cancel must know the group's deliveries; nothing was changed");
    }
    return what == "cancelled" ? CancelOutcome::cancelled
           : what == "pending" ? CancelOutcome::running
                               : CancelOutcome::missing;
  };
  if (!is_entry_id(id)) {
    // A flow's parent waiting for its children: it ends cancelled, and so do they (each as a
    // task cancelled on its own: a running one is asked to stop), in its partition or in
    // theirs (a flow across partitions), or in their queue (across queues).
    Argv argv = scripts.begin(detail::ScriptId::cancel_flow, 1);
    argv.add(keys.stream).add(id);
    connected();
    const Reply r = scripts.call(detail::ScriptId::cancel_flow, argv);
    const ReplyView v = r.view().check();
    if (v.is_array()) {
      // Its children in other queues are named in its record (cancel_flow.lua read it).
      const std::map<std::string, std::string> elsewhere = detail::parse_child_queues(v[1].str());
      std::map<std::string, std::vector<std::string>> their_parts;  // another queue's partitions
      const ReplyView unfinished = v[0];
      for (std::size_t i = 0; i < unfinished.size(); ++i) {
        const std::string child(unfinished[i].str());
        if (const auto q = elsewhere.find(child); q != elsewhere.end()) {
          auto [at, added] = their_parts.try_emplace(q->second);
          if (added) at->second = this->parts(q->second);
          cancel_in(at->second, "", child);
        } else if (cancel_one(keys, child, parts) == CancelOutcome::missing) {
          cancel_in(parts, "", child);
        }
      }
      return CancelOutcome::cancelled;
    }
  }
  if (is_entry_id(id)) {
    for (Priority p : kPriorities) {
      const CancelOutcome c = cancel_entry(level_stream(keys, p), id);
      if (c != CancelOutcome::missing) return c;
    }
    return CancelOutcome::missing;
  }
  // A task can move between the delayed set, its tenant's backlog and a stream while it is
  // looked for (a retry with backoff, a due task forwarded, its tenant's turn): each place is
  // searched in the order a task moves through them, and once more before answering missing.
  const auto remove_waiting = [&](const std::string& key, const std::string& member, std::string_view kind) {
    Argv argv = scripts.begin(detail::ScriptId::cancel_waiting, 1);
    argv.add(key).add(member).add(keys.stream).add(kind);
    connected();
    const Reply r = scripts.call(detail::ScriptId::cancel_waiting, argv);
    return r.view().check().integer() == 1;
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (auto d = find_delayed(keys, id)) {
      if (remove_waiting(keys.delayed, d->member, "")) return CancelOutcome::cancelled;
    }
    if (auto b = find_backlog(keys, id)) {
      if (remove_waiting(b->info.key, b->element, "backlog")) return CancelOutcome::cancelled;
    }
    // Not delayed nor in a backlog (just searched): queued, held, dead or gone.
    const auto found = find_in_streams(keys, id);
    if (!found) continue;
    if (found->state == TaskState::dead) return CancelOutcome::missing;
    const CancelOutcome c = cancel_entry(found->key, found->id);
    if (c != CancelOutcome::missing) return c;
  }
  return CancelOutcome::missing;
}

/// `command <the pause flag of each part of queue> args...`, pipelined; their replies.
std::vector<Reply> Inspector::Impl::on_pause_flags(const std::string& queue, std::string_view command,
                                                   std::string_view arg) {
  std::vector<std::string> flags;  // the argvs' strings
  for (const std::string& part : parts(queue)) flags.push_back(detail::queue_keys(part).paused);
  std::vector<Argv> argvs;
  for (const std::string& flag : flags) {
    Argv& a = argvs.emplace_back(Argv{command, flag});
    if (!arg.empty()) a.add(arg);
  }
  std::vector<Reply> replies = connected().pipeline(argvs);
  for (const Reply& r : replies) r.view().check();
  return replies;
}

void Inspector::pause(const std::string& queue) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  const std::string at = detail::format_timestamp(std::chrono::system_clock::now());
  impl_->on_pause_flags(queue, "SET", at);
}

void Inspector::resume(const std::string& queue) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  impl_->on_pause_flags(queue, "DEL", "");
}

bool Inspector::paused(const std::string& queue) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  for (const Reply& r : impl_->on_pause_flags(queue, "EXISTS", "")) {
    if (r.view().integer() != 1) return false;
  }
  return true;
}

}  // namespace streamq
