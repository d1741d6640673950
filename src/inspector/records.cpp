// SPDX-License-Identifier: MIT
// The Inspector's reads of tracked tasks: a task's record and the queue's events.
#include <charconv>
#include <sstream>

#include <nlohmann/json.hpp>

#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "streamq/errors.hpp"
#include "util/durations.hpp"
#include "wire/record.hpp"

namespace streamq {

using detail::Argv;
using detail::Reply;
using detail::ReplyView;

std::optional<TaskRecord> Inspector::record(const std::string& queue, const std::string& task_id) {
  const std::lock_guard lock(impl_->calls);
  detail::check_queue(queue);
  if (task_id.empty()) throw ConfigError("task_id must not be empty");
  const std::vector<std::string> parts = impl_->parts(queue);
  const Impl::Target t = Impl::target(parts, task_id);
  std::vector<std::string> keys;  // the argvs' strings
  std::vector<const std::string*> of;
  std::vector<Argv> argvs;
  for (const std::string& part : parts) {
    if (!t.part.empty() && part != t.part) continue;
    keys.push_back(detail::task_key(part, t.id));
    of.push_back(&part);
  }
  argvs.reserve(keys.size());
  for (const std::string& k : keys) argvs.push_back(Argv{"HGETALL", k});
  const std::vector<Reply> replies = impl_->connected().pipeline(argvs);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (auto r = detail::parse_record(replies[i].view().check(), t.id, *of[i])) return r;
  }
  return std::nullopt;
}

namespace {
constexpr std::size_t kMaxFlowRecords = 10000;  // a flow's size at most (Producer::enqueue_flow)
}  // namespace

std::optional<FlowTree> Inspector::flow(const std::string& queue, const std::string& task_id) {
  std::optional<TaskRecord> top = record(queue, task_id);
  if (!top) return std::nullopt;
  FlowTree root{task_id, std::move(top), {}, queue};
  std::size_t read = 1;
  // Breadth first, each level's records read one by one (record() finds each one's partition,
  // in its queue).
  std::vector<FlowTree*> level{&root};
  while (!level.empty()) {
    std::vector<FlowTree*> next;
    for (FlowTree* node : level) {
      if (!node->record) continue;
      node->children.reserve(node->record->children.size());
      for (const std::string& id : node->record->children) {
        if (read++ >= kMaxFlowRecords) return root;
        const auto elsewhere = node->record->child_queues.find(id);
        const std::string& in =
            elsewhere != node->record->child_queues.end() ? elsewhere->second : node->queue;
        node->children.push_back(FlowTree{id, record(in, id), {}, in});
      }
      for (FlowTree& child : node->children) next.push_back(&child);
    }
    level = std::move(next);
  }
  return root;
}

std::string BatchInfo::to_json() const {
  const nlohmann::ordered_json j = {{"batch_id", batch_id},
                                    {"state", state},
                                    {"total", total},
                                    {"done", done},
                                    {"failed", failed},
                                    {"pending", pending()},
                                    {"parent_batch", parent_batch}};
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::optional<BatchInfo> Inspector::batch(const std::string& queue, const std::string& batch_id) {
  const std::lock_guard lock(impl_->calls);
  detail::check_queue(queue);
  if (batch_id.empty()) throw ConfigError("batch_id must not be empty");
  std::vector<std::string> keys;  // the argvs' strings
  for (const std::string& part : impl_->parts(queue)) keys.push_back(detail::batch_key(part, batch_id));
  std::vector<Argv> argvs;
  argvs.reserve(keys.size());
  for (const std::string& k : keys) argvs.push_back(Argv{"HGETALL", k});
  const std::vector<Reply> replies = impl_->connected().pipeline(argvs);
  for (const Reply& r : replies) {
    const ReplyView v = r.view().check();
    if (v.size() == 0) continue;
    BatchInfo b{.batch_id = batch_id};
    const auto count = [](std::string_view text) {
      std::int64_t n = 0;
      std::from_chars(text.data(), text.data() + text.size(), n);
      return n;
    };
    for (std::size_t i = 0; i + 1 < v.size(); i += 2) {
      const std::string_view name = v[i].str();
      const std::string_view value = v[i + 1].str();
      if (name == "state") b.state = std::string(value);
      if (name == "total") b.total = count(value);
      if (name == "done") b.done = count(value);
      if (name == "failed") b.failed = count(value);
      if (name == "parent") b.parent_batch = std::string(value);
    }
    return b;
  }
  return std::nullopt;
}

Inspector::QueueEvents Inspector::events(const std::string& queue, const std::string& after,
                                         std::size_t count, std::chrono::milliseconds block) {
  const std::lock_guard lock(impl_->calls);
  detail::check_queue(queue);
  if (count < 1 || count > 10000) throw ConfigError("count must be 1 to 10,000");
  detail::check_duration(block, std::chrono::milliseconds(0), "block");
  if (block + std::chrono::seconds(1) > impl_->conn.config().socket_timeout) {
    throw ConfigError("block must be at least 1 s shorter than connection.socket_timeout");
  }
  const std::vector<std::string> parts = impl_->parts(queue);
  std::vector<std::string> from;
  std::istringstream words(after);
  for (std::string w; words >> w;) from.push_back(w);
  if (from.empty()) from.assign(parts.size(), after.empty() ? "0-0" : after);
  if (from.size() == 1 && parts.size() > 1) from.assign(parts.size(), from[0]);
  if (from.size() != parts.size()) {
    throw ConfigError("after holds " + std::to_string(from.size()) + " ids for " +
                      std::to_string(parts.size()) + " partitions");
  }
  for (const std::string& id : from) {
    if (id != "$" && !detail::is_entry_id(id))
      throw ConfigError("\"" + id + "\" is not an event id (<ms>-<seq>)");
  }
  // "$" is this moment's newest event: resolved to its id, so that `next` can be passed back.
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (from[i] != "$") continue;
    const Reply r = impl_->run(Argv{"XREVRANGE", detail::events_key(parts[i]), "+", "-", "COUNT", "1"});
    const ReplyView v = r.view().check();
    from[i] = v.size() > 0 ? std::string(v[0][0].str()) : "0-0";
  }
  QueueEvents out;
  // One XREAD per partition: on a cluster they are in slots of their own. Only the first may
  // block, and only when the others had nothing.
  std::vector<std::string> streams;
  streams.reserve(parts.size());
  for (const std::string& part : parts) streams.push_back(detail::events_key(part));
  for (int pass = 0; pass < 2 && out.events.empty(); ++pass) {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      Argv argv{"XREAD", "COUNT"};
      argv.add(static_cast<std::int64_t>(count));
      const bool blocking = pass == 1 && i == 0 && block.count() > 0;
      if (blocking) argv.add("BLOCK").add(static_cast<std::int64_t>(block.count()));
      argv.add("STREAMS").add(streams[i]).add(from[i]);
      if (pass == 1 && !blocking) continue;
      const Reply r = impl_->run(argv);
      const ReplyView v = r.view().check();
      if (v.is_nil()) continue;
      const ReplyView entries = v[0][1];
      for (std::size_t e = 0; e < entries.size(); ++e) {
        out.events.push_back(detail::parse_event(entries[e], parts[i]));
        from[i] = out.events.back().id;
      }
    }
    if (block.count() == 0) break;
  }
  for (std::size_t i = 0; i < from.size(); ++i) out.next += (i ? " " : "") + from[i];
  return out;
}

}  // namespace streamq
