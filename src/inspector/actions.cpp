// SPDX-License-Identifier: MIT
// The Inspector's actions: replay, delete and purge dead letters, run a delayed task now,
// cancel, pause and resume. Each is one script or one command per batch, so a worker running
// meanwhile never sees a task in two places.
#include <algorithm>

#include "codec.hpp"
#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "keys.hpp"
#include "streamq/errors.hpp"

namespace streamq {

using detail::Argv;
using detail::check_queue;
using detail::fields_of;
using detail::is_entry_id;
using detail::kLevels;
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

ActionResult Inspector::replay(const std::string& queue, const ReplayOptions& options) {
  check_queue(queue);
  const detail::QueueKeys keys = detail::queue_keys(queue);
  const std::string& dest = detail::priority_stream(keys, options.priority);
  const std::string replayed_at = detail::format_timestamp(std::chrono::system_clock::now());
  return impl_->each_dead(keys, options.filter, options.progress,
                          [&](const std::vector<std::string>& ids, ActionResult& result) {
                            Argv argv = impl_->scripts.begin(detail::ScriptId::replay, 2);
                            argv.add(keys.dlq).add(dest).add(replayed_at);
                            argv.add(options.filter.task_type).add(options.filter.reason);
                            for (const std::string& id : ids) argv.add(id);
                            impl_->connected();
                            const Reply r = impl_->scripts.call(detail::ScriptId::replay, argv);
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
  check_queue(queue);
  const detail::QueueKeys keys = detail::queue_keys(queue);
  const bool by_fields = !filter.task_type.empty() || !filter.reason.empty();
  return impl_->each_dead(keys, filter, progress,
                          [&](const std::vector<std::string>& ids, ActionResult& result) {
                            std::vector<std::string> chosen;
                            if (by_fields && !filter.ids.empty()) {
                              // Ids named and a filter: delete those that match (dead letters never change,
                              // so the read and the XDEL cannot disagree about a match).
                              std::vector<Argv> reads;
                              for (const std::string& id : ids)
                                reads.push_back(Argv{"XRANGE", keys.dlq, id, id});
                              const auto replies = impl_->connected().pipeline(reads);
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
                            Argv argv{"XDEL", keys.dlq};
                            for (const std::string& id : chosen) argv.add(id);
                            const std::int64_t n = impl_->run(argv).view().check().integer();
                            result.done += n;
                            result.skipped += static_cast<std::int64_t>(chosen.size()) - n;
                          });
}

std::int64_t Inspector::purge_dead(const std::string& queue) {
  check_queue(queue);
  const detail::QueueKeys keys = detail::queue_keys(queue);
  std::vector<Argv> argvs;
  argvs.push_back(Argv{"MULTI"});
  argvs.push_back(Argv{"XLEN", keys.dlq});
  argvs.push_back(Argv{"UNLINK", keys.dlq});
  argvs.push_back(Argv{"EXEC"});
  const auto r = impl_->connected().pipeline(argvs);
  const ReplyView exec = r[3].view().check();
  if (exec.is_nil() || exec.size() != 2) throw Error("purge: the transaction was not executed");
  return exec[0].check().integer();
}

std::optional<std::string> Inspector::run_now(const std::string& queue, const std::string& task_id) {
  check_queue(queue);
  if (task_id.empty()) throw ConfigError("task_id must not be empty");
  const detail::QueueKeys keys = detail::queue_keys(queue);
  const auto found = impl_->find_delayed(keys, task_id);
  if (!found) return std::nullopt;
  Argv argv = impl_->scripts.begin(detail::ScriptId::run_delayed, 4);
  argv.add(keys.delayed).add(keys.stream).add(keys.high).add(keys.low).add(found->member);
  impl_->connected();
  const Reply r = impl_->scripts.call(detail::ScriptId::run_delayed, argv);
  const ReplyView v = r.view().check();
  if (v.is_nil()) return std::nullopt;  // a forwarder moved it meanwhile
  return std::string(v.str());
}

CancelOutcome Inspector::cancel(const std::string& queue, const std::string& id) {
  check_queue(queue);
  if (id.empty()) throw ConfigError("id must not be empty");
  const detail::QueueKeys keys = detail::queue_keys(queue);
  const auto cancel_entry = [&](const std::string& stream, const std::string& entry_id) {
    Argv argv = impl_->scripts.begin(detail::ScriptId::cancel, 1);
    argv.add(stream).add(impl_->options.group).add(entry_id).add(keys.stream);
    impl_->connected();
    const Reply r = impl_->scripts.call(detail::ScriptId::cancel, argv);
    const std::string_view what = r.view().check()[0].str();
    return what == "cancelled" ? CancelOutcome::cancelled
           : what == "pending" ? CancelOutcome::running
                               : CancelOutcome::missing;
  };
  if (is_entry_id(id)) {
    for (Priority p : kLevels) {
      const CancelOutcome c = cancel_entry(level_stream(keys, p), id);
      if (c != CancelOutcome::missing) return c;
    }
    return CancelOutcome::missing;
  }
  // A task can move between the delayed set and a stream while it is looked for (a retry with
  // backoff, a due task forwarded): look once more before answering missing.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (auto d = impl_->find_delayed(keys, id)) {
      Argv argv = impl_->scripts.begin(detail::ScriptId::cancel_delayed, 1);
      argv.add(keys.delayed).add(d->member).add(keys.stream);
      impl_->connected();
      const Reply r = impl_->scripts.call(detail::ScriptId::cancel_delayed, argv);
      if (r.view().check().integer() == 1) return CancelOutcome::cancelled;
    }
    // Not delayed (the delayed set was just searched): queued, held, dead or gone.
    const auto found = impl_->find_in_streams(keys, id);
    if (!found) continue;
    if (found->state == TaskState::dead) return CancelOutcome::missing;
    const CancelOutcome c = cancel_entry(found->key, found->id);
    if (c != CancelOutcome::missing) return c;
  }
  return CancelOutcome::missing;
}

void Inspector::pause(const std::string& queue) {
  check_queue(queue);
  const std::string at = detail::format_timestamp(std::chrono::system_clock::now());
  impl_->run(Argv{"SET", detail::queue_keys(queue).paused, at}).view().check();
}

void Inspector::resume(const std::string& queue) {
  check_queue(queue);
  impl_->run(Argv{"DEL", detail::queue_keys(queue).paused}).view().check();
}

bool Inspector::paused(const std::string& queue) {
  check_queue(queue);
  return impl_->run(Argv{"EXISTS", detail::queue_keys(queue).paused}).view().check().integer() == 1;
}

}  // namespace streamq
