// SPDX-License-Identifier: MIT
// Producer::enqueue_flow, and the flows it is given ready-made: chain and chord. The flow is
// flattened (each task with its parent's place), prepared as any task, and written by one call
// of the enqueue script (src/lua/enqueue.lua; the bookkeeping that runs the parents is in
// src/lua/lib/flows.lua). And batches: Producer::open_batch and close_batch (src/lua/batch.lua).
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "log.hpp"
#include "producer_impl.hpp"
#include "redis/cluster.hpp"
#include "redis/connection_config.hpp"
#include "redis/scripts.hpp"
#include "refusals.hpp"
#include "streamq/errors.hpp"
#include "streamq/producer.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {

namespace detail {

/// A flow's tasks in pre-order, each with its parent's place (none for the root) and the
/// places of its children.
struct FlatFlow {
  std::vector<TaskSpec> tasks;
  std::vector<std::ptrdiff_t> parent;
  std::vector<ChildFailure> on_failure;
  std::vector<std::vector<std::size_t>> children;
  std::vector<std::optional<FlowQueue>> queue;  // set for a task that goes to another queue
};

}  // namespace detail

namespace {

constexpr std::size_t kMaxFlowTasks = 10000;  // one script call writes them all
constexpr int kMaxFlowDepth = 64;             // the scripts that finish a child recurse this deep at most

using detail::FlatFlow;

/// The other queue `node` goes to, checked; unset for the producer's own. `seen`: the other
/// queues of the flow so far, each with its partitions (one queue, one count).
std::optional<FlowQueue> other_queue(const FlowNode& node, bool root, const ProducerOptions& o, bool cluster,
                                     std::map<std::string, int>& seen) {
  if (!node.queue) return std::nullopt;
  const FlowQueue& q = *node.queue;
  const std::string what =
      "a flow's task (task type \"" + node.task_type + "\") in queue \"" + q.stream + "\"";
  if (q.stream.empty()) throw ConfigError("FlowNode::queue: the stream must not be empty");
  detail::check_partitions(q.partitions, q.stream);
  // (Compared, and kept, in one form: `{gpu}` and `gpu` of 4 partitions are one queue.)
  const std::string name = detail::queue_name(q.stream, q.partitions);
  if (q.stream == o.stream || name == detail::queue_name(o.stream, o.partitions)) {
    if (q.partitions != o.partitions) {
      throw ConfigError(what + ": the producer's queue has " + std::to_string(o.partitions) +
                        " partitions, not " + std::to_string(q.partitions));
    }
    return std::nullopt;  // the producer's own
  }
  if (o.partitions > 1 && detail::is_partition_of(o.stream, q.stream)) {
    throw ConfigError(what + ": a partition of the producer's own queue (its partition_key chooses that)");
  }
  // (On Cluster a queue of one partition keeps its keys in one slot by a hash tag in its name,
  // as the producer's own stream must: else no placement there could ever be made.)
  if (cluster && q.partitions == 1) detail::check_cluster_stream(q.stream, "FlowNode::queue.stream");
  if (const auto [at, added] = seen.try_emplace(name, q.partitions); !added && at->second != q.partitions) {
    throw ConfigError(what + ": named with " + std::to_string(at->second) + " and " +
                      std::to_string(q.partitions) + " partitions in one flow");
  }
  if (root) throw ConfigError(what + ": a flow's root goes to the producer's queue");
  if (!node.children.empty()) {
    throw ConfigError(what +
                      ": only a task without children may go to another queue (a parent lives in "
                      "the flow's queue, with its flow's keys)");
  }
  if (!node.options.batch.empty() || node.options.unique_for.count() > 0) {
    throw ConfigError(what + ": a task in another queue may not join a batch or be unique");
  }
  return FlowQueue{.stream = name, .partitions = q.partitions};
}

/// What flatten needs of the producer.
struct FlowContext {
  const ProducerOptions& options;
  bool cluster;
  std::map<std::string, int> queues{};  // the other queues named so far, with their partitions
};

/// `root_id`: the root's task id (given, or drawn by the caller: the flow's home follows from it).
void flatten(const FlowNode& node, std::ptrdiff_t parent, int depth, const std::string& partition_key,
             const std::string& root_id, FlowContext& context, FlatFlow& flat) {
  if (depth >= kMaxFlowDepth) {
    throw ConfigError("flow deeper than " + std::to_string(kMaxFlowDepth) + " levels");
  }
  if (flat.tasks.size() >= kMaxFlowTasks) {
    throw ConfigError("flow of more than " + std::to_string(kMaxFlowTasks) + " tasks");
  }
  if (!node.children.empty() && (node.options.delay.count() > 0 || node.options.run_at)) {
    throw ConfigError("a flow's parent (task type \"" + node.task_type +
                      "\") runs when its children finished: it cannot have a delay or run_at");
  }
  if (node.on_failure != ChildFailure::fail_parent && node.on_failure != ChildFailure::ignore &&
      node.on_failure != ChildFailure::remove) {
    throw ConfigError("on_failure must be ChildFailure::fail_parent, ignore or remove");
  }
  std::optional<FlowQueue> queue =
      other_queue(node, parent < 0, context.options, context.cluster, context.queues);
  const std::size_t place = flat.tasks.size();
  TaskSpec spec{node.task_type, node.payload, node.options};
  if (spec.options.task_id.empty()) spec.options.task_id = parent < 0 ? root_id : detail::new_uuid_v4();
  // Every parent lives in the root's partition (its flow's keys with it); a task without
  // children goes to its own (its partition_key's, else the next in turn): see enqueue_flow.
  if (!node.children.empty() || parent < 0) spec.options.partition_key = partition_key;
  // Every task of a flow is tracked: the producer's retention, else an hour once done.
  if (!spec.options.retention && !context.options.retention)
    spec.options.retention = Retention{.done = std::chrono::hours(1)};
  flat.tasks.push_back(std::move(spec));
  flat.parent.push_back(parent);
  flat.on_failure.push_back(node.on_failure);
  flat.children.emplace_back();
  flat.queue.push_back(std::move(queue));
  if (parent >= 0) flat.children[static_cast<std::size_t>(parent)].push_back(place);
  for (const FlowNode& child : node.children) {
    flatten(child, static_cast<std::ptrdiff_t>(place), depth + 1, partition_key, root_id, context, flat);
  }
}

std::string_view failure_text(ChildFailure f) {
  switch (f) {
    case ChildFailure::ignore: return "ignore";
    case ChildFailure::remove: return "remove";
    case ChildFailure::fail_parent: break;
  }
  return "fail";
}

FlowIds ids_of(const std::vector<std::string>& ids, const FlatFlow& flat, std::size_t place) {
  FlowIds out{ids[place], {}};
  out.children.reserve(flat.children[place].size());
  for (const std::size_t c : flat.children[place]) out.children.push_back(ids_of(ids, flat, c));
  return out;
}

}  // namespace

FlowNode chain(std::vector<TaskSpec> tasks) {
  if (tasks.empty()) throw ConfigError("chain: no tasks");
  FlowNode node{tasks.front().task_type, std::move(tasks.front().payload), std::move(tasks.front().options)};
  for (std::size_t i = 1; i < tasks.size(); ++i) {
    FlowNode next{tasks[i].task_type, std::move(tasks[i].payload), std::move(tasks[i].options)};
    next.children.push_back(std::move(node));
    node = std::move(next);
  }
  return node;
}

FlowNode chord(std::vector<TaskSpec> header, TaskSpec callback, ChildFailure on_failure) {
  if (header.empty()) throw ConfigError("chord: no header tasks");
  FlowNode node{callback.task_type, std::move(callback.payload), std::move(callback.options)};
  node.children.reserve(header.size());
  for (TaskSpec& t : header) {
    node.children.push_back(FlowNode{t.task_type, std::move(t.payload), std::move(t.options), on_failure});
  }
  return node;
}

FlowNode group(std::vector<TaskSpec> tasks, ChildFailure on_failure) {
  if (tasks.empty()) throw ConfigError("group: no tasks");
  FlowNode node{std::string(group_task_type), Payload("{}"), {}};
  node.children.reserve(tasks.size());
  for (TaskSpec& t : tasks) {
    node.children.push_back(FlowNode{t.task_type, std::move(t.payload), std::move(t.options), on_failure});
  }
  return node;
}

std::vector<ChildResult> group_results(const TaskRecord& group) {
  if (group.task_type != group_task_type) {
    throw ConfigError("task " + group.task_id + " is a \"" + group.task_type + "\", not a group");
  }
  if (group.state != TaskRecord::State::done || !group.result) return {};
  return detail::parse_children(*group.result);
}

/// A flow's write (see Producer::enqueue_flow): its tasks flattened and prepared, the home's call
/// and the placements it packs. Built by build_flow(), answered by accept_flow(); it must not
/// move in between (the command views its strings).
struct Producer::Impl::FlowWrite {
  FlatFlow flat;
  std::vector<std::string> ids;  // viewed by the prepared tasks: sized once
  std::string created_at;        // viewed by each of them
  std::vector<detail::Prepared> prepared;
  int home = 0;
  struct Away {
    detail::QueueKeys keys;
    std::vector<detail::Prepared> tasks;
  };
  std::map<std::string, Away> away;       // the children placed elsewhere, by their stream
  std::vector<detail::Prepared> at_home;  // the rest, and a stub of each of those
  Placements placements;
  std::vector<std::string> packed;
  detail::Argv argv;
};

std::unique_ptr<Producer::Impl::FlowWrite> Producer::Impl::build_flow(const FlowNode& root) {
  auto w = std::make_unique<FlowWrite>();
  FlatFlow& flat = w->flat;
  // Every parent in the root's partition (its partition_key's, else its task id's, drawn first
  // when not given): a flow's bookkeeping lives in one slot.
  const std::string root_id = root.options.task_id.empty() ? detail::new_uuid_v4() : root.options.task_id;
  const std::string& partition_key =
      root.options.partition_key.empty() ? root_id : root.options.partition_key;
  if (options.overflow == Overflow::trim_oldest) {
    throw ConfigError(
        "enqueue_flow needs Overflow::reject: trim_oldest may drop a child unfinished, and its "
        "parent would wait forever");
  }
  FlowContext context{options, link.config().endpoint.is_cluster()};
  flatten(root, -1, 0, partition_key, root_id, context, flat);
  for (const TaskSpec& t : flat.tasks) {
    refuse_debounce(t.options, "enqueue_flow");
    if (options.partitions > 1 && (!t.options.batch.empty() || t.options.unique_for.count() > 0)) {
      // (A batch's task goes to the batch's partition: the flow would be split; a unique task's
      // lock would be in the flow's partition, not the unique key's.)
      throw ConfigError("in a partitioned queue a flow's task may not join a batch or be unique");
    }
    if (options.partitions > 1 && !t.options.tenant.empty()) {
      // (It would go to its tenant's partition, where its parent's flow is not.)
      throw ConfigError("in a partitioned queue a flow's task may not name a tenant");
    }
  }
  if (has_middleware.load() || options.tracer) flat.tasks = through_middleware(flat.tasks);
  const std::size_t n = flat.tasks.size();
  std::vector<std::string>& ids = w->ids;
  ids.resize(n);
  std::unordered_set<std::string_view> seen;
  const std::string& created_at = w->created_at = detail::format_timestamp(std::chrono::system_clock::now());
  std::vector<detail::Prepared>& prepared = w->prepared;
  prepared.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const TaskSpec& t = flat.tasks[i];
    prepared.push_back(prepare(t.task_type, t.payload.text(), t.options, ids[i], created_at));
    if (!seen.insert(ids[i]).second) throw ConfigError("flow: task id \"" + ids[i] + "\" is given twice");
  }
  for (std::size_t i = 0; i < n; ++i) {
    detail::Prepared& p = prepared[i];
    if (flat.parent[i] >= 0) {
      p.task.flow_parent = ids[static_cast<std::size_t>(flat.parent[i])];
      p.task.flow_on_failure = failure_text(flat.on_failure[i]);
    }
    if (!flat.children[i].empty()) p.dest = -p.dest;  // waits for its children (enqueue.lua)
  }
  const int home = w->home = prepared[0].partition;
  const std::string& home_stream = keys[static_cast<std::size_t>(home)].stream;
  // The children placed elsewhere, by the stream they go to: another partition's of this queue,
  // or another queue's (its partition: the task's partition_key's, else its id's).
  auto& away = w->away;
  std::vector<detail::Prepared>& at_home = w->at_home;
  at_home.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    detail::Prepared& p = prepared[i];
    const std::optional<FlowQueue>& queue = flat.queue[i];
    if (!queue && p.partition == home) {
      at_home.push_back(p);
      continue;
    }
    detail::QueueKeys to = keys[static_cast<std::size_t>(p.partition)];
    if (queue) {
      const std::string& key =
          flat.tasks[i].options.partition_key.empty() ? ids[i] : flat.tasks[i].options.partition_key;
      const int part = static_cast<int>(detail::crc16(key) % static_cast<unsigned>(queue->partitions));
      to = detail::queue_keys(detail::partition_stream(queue->stream, queue->partitions, part));
    }
    // A stub in the home's call (joins its parent's pending set, written nowhere: enqueue.lua);
    // the child itself is placed in its partition, carrying flow_home.
    detail::Prepared& stub = at_home.emplace_back(p);
    stub.dest = 0;
    stub.task.payload = "{}";
    stub.task.extra_fields = nullptr;
    if (queue) stub.task.flow_queue = queue->stream;
    p.task.flow_home = home_stream;
    const auto [there, added] = away.try_emplace(to.stream);
    if (added) there->second.keys = std::move(to);
    there->second.tasks.push_back(p);
  }
  // One enqueue call per other partition or queue ('placed', its guard the last key), each
  // packed into the home's call under a token of its own.
  Placements& placements = w->placements;
  placements.calls.reserve(away.size());  // (each viewed by the argv: never reallocated)
  placements.tokens.reserve(away.size());
  placements.guards.reserve(away.size());
  std::vector<std::string>& packed = w->packed;
  packed.reserve(away.size());
  for (const auto& [to, there] : away) {
    const std::string& token = placements.tokens.emplace_back(detail::new_uuid_v4());
    const std::string& guard = placements.guards.emplace_back(detail::placed_key(to, token));
    detail::Argv& a =
        placements.calls.emplace_back(script_argv(there.tasks, 0, there.tasks.size(), guard, 0, &there.keys));
    a.set(3 + 5, "placed");  // (EVALSHA, sha, numkeys 5, the 4 keys and the guard, ARGV[1])
    std::string& blob = packed.emplace_back();
    for (std::size_t i = 2; i < a.size(); ++i) detail::append_counted(blob, a[i]);
  }
  w->argv = script_argv(at_home, 0, at_home.size());
  if (!away.empty()) {
    w->argv.add(static_cast<std::int64_t>(away.size()));
    std::size_t i = 0;
    for (const auto& entry : away) {
      w->argv.add(entry.first).add(placements.tokens[i]).add(packed[i]);
      ++i;
    }
  }
  return w;
}

FlowIds Producer::Impl::accept_flow(FlowWrite& w, const detail::Reply& reply) {
  if (detail::is_queue_full(reply)) throw QueueFullError(std::string(reply.view().error()));
  if (detail::is_batch_closed(reply)) throw BatchClosedError(std::string(reply.view().error()));
  if (auto d = detail::parse_duplicate(reply)) {
    throw DuplicateTaskError(detail::duplicate_message(*d), d->holder);
  }
  reply.view().check();
  // (Placed before the flow's own WAIT: a ReplicationError leaves them placed, not for a courier.)
  if (!w.placements.calls.empty()) place_away(w.home, w.placements);
  return ids_of(w.ids, w.flat, 0);
}

FlowIds Producer::enqueue_flow(const FlowNode& root) {
  Impl& im = *impl_;
  const std::unique_ptr<Impl::FlowWrite> w = im.build_flow(root);
  std::uint64_t written_on = 0;
  std::vector<detail::Reply> replies =
      im.link.run({{&w->argv, detail::ScriptId::enqueue}}, true, &written_on);
  FlowIds ids = im.accept_flow(*w, replies[0]);
  im.wait_for_replicas(w->ids, written_on, {im.keys[static_cast<std::size_t>(w->home)].stream});
  return ids;
}

void Producer::enqueue_flow_async(const FlowNode& root, FlowHandler done) {
  Impl& im = *impl_;
  std::shared_ptr<Impl::FlowWrite> w;
  try {
    if (!done) throw ConfigError("enqueue_flow_async: the completion must not be empty");
    w = im.build_flow(root);
  } catch (...) {
    if (!done) throw;
    im.link.post([done](const detail::SharedOutcome& o) { done(o.error, {}); },
                 {{}, std::current_exception()});
    return;
  }
  im.link.submit({{&w->argv, detail::ScriptId::enqueue}}, true,
                 [&im, w, done = std::move(done)](detail::SharedOutcome o) {
                   FlowIds ids;
                   try {
                     if (o.error) std::rethrow_exception(o.error);
                     ids = im.accept_flow(*w, o.replies[0]);
                   } catch (...) {
                     return done(std::current_exception(), {});
                   }
                   if (im.options.min_replicas_acked == 0) return done(nullptr, std::move(ids));
                   im.replicas_then(
                       w->ids, o.generation, im.keys[static_cast<std::size_t>(w->home)].stream,
                       [done, ids](const std::exception_ptr& e) { done(e, e ? FlowIds{} : ids); });
                 });
}

std::future<FlowIds> Producer::enqueue_flow_async(const FlowNode& root) {
  auto promise = std::make_shared<std::promise<FlowIds>>();
  std::future<FlowIds> f = promise->get_future();
  enqueue_flow_async(root, detail::settling(std::move(promise)));
  return f;
}

void Producer::Impl::place_away(int home, Placements& placements) {
  // The flow is accepted: its placements wait in the home's hash. Made here at once (a
  // consumer's courier makes what is left there after kPlacementGrace: this process may die
  // now, or a partition be out of reach); once they are on the replicas asked for, taken out of
  // the hash, their guards kept only while a courier that read them meanwhile may still try.
  std::vector<detail::SharedCommand> calls;
  calls.reserve(placements.calls.size());
  for (detail::Argv& a : placements.calls) calls.push_back({&a, detail::ScriptId::enqueue});
  std::vector<detail::Argv> done;
  done.reserve(1 + placements.calls.size());
  done.push_back(detail::Argv{"HDEL", keys[static_cast<std::size_t>(home)].placing});
  std::uint64_t placed_on = 0;
  std::vector<detail::Reply> placed;
  try {
    placed = link.run(calls, true, &placed_on);
  } catch (const Error& e) {
    detail::log(LogLevel::warning,
                std::string("a flow's tasks in other partitions or queues may not be placed yet (") +
                    e.what() + "): a consumer's courier places those that are not");
    return;
  }
  for (std::size_t i = 0; i < placed.size(); ++i) {
    if (placed[i].view().is_error()) {
      detail::log(LogLevel::warning, "a flow's tasks in " + std::string(placements.calls[i][3]) +
                                         " were not placed yet (" + std::string(placed[i].view().error()) +
                                         "): a consumer's courier places them");
      continue;
    }
    done[0].add(placements.tokens[i]);
    done.push_back(detail::Argv{"PEXPIRE", placements.guards[i], detail::kPlacedGuardAfterMs});
  }
  if (done.size() == 1) return;
  try {
    std::vector<std::string> placed_in;  // (each call's first key: the stream it placed tasks in)
    for (const detail::Argv& a : placements.calls) placed_in.emplace_back(a[3]);
    if (options.min_replicas_acked > 0 &&
        replicas_acknowledging(placed_on, placed_in) < options.min_replicas_acked) {
      return;  // (a failover could lose them: left for a courier, which finds them made, or not)
    }
    std::vector<detail::SharedCommand> cleanup;
    cleanup.reserve(done.size());
    for (detail::Argv& a : done) cleanup.push_back({&a, detail::not_a_script});
    link.run(cleanup, true);
  } catch (const Error& e) {
    detail::log(
        LogLevel::info,
        std::string("a flow's tasks in other partitions or queues were placed, but not taken out of ") +
            keys[static_cast<std::size_t>(home)].placing + " (" + e.what() +
            "): a consumer's courier finds them made, and does that");
  }
}

}  // namespace streamq
