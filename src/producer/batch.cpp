// SPDX-License-Identifier: MIT
// Producer::enqueue_batch's write: the tasks in chunks of one partition, pipelined, what is
// written kept a prefix of each partition's tasks, and the messages of a batch refused part-way.
#include <algorithm>
#include <chrono>
#include <optional>

#include "producer_impl.hpp"
#include "redis/scripts.hpp"
#include "refusals.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq {

using detail::Duplicate;
using detail::duplicate_message;
using detail::is_queue_full;
using detail::parse_duplicate;
using detail::Prepared;
using detail::sent_to_wrong_place;

namespace {

// The enqueue script's reply for a chunk not run because an earlier chunk of its batch was not.
constexpr std::int64_t kBehindUnrun = -1;
constexpr std::size_t kChunk = 64;  // tasks per enqueue script call: small enough that Redis runs one
                                    // chunk while the next is formatted (measured: 64 beats 16-256)

struct IndexRanges {
  std::size_t count = 0;
  std::string text;  // "0-63, 70"
};

/// The indices i of `ids` with ids[i].empty() == !written, as ranges.
IndexRanges index_ranges(const std::vector<std::string>& ids, bool written) {
  IndexRanges r;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty() == written) continue;
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1].empty() != written) ++j;
    if (!r.text.empty()) r.text += ", ";
    r.text += i == j ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j);
    r.count += j - i + 1;
    i = j;
  }
  return r;
}

/// "wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and wrote nothing after
/// the first refused one".
std::string batch_outcome(const std::vector<std::string>& ids) {
  const IndexRanges w = index_ranges(ids, true);
  const IndexRanges r = index_ranges(ids, false);
  auto described = [](const IndexRanges& x) {
    if (x.count == 0) return std::string("0");
    return std::to_string(x.count) + (x.count == 1 ? " (index " : " (indices ") + x.text + ")";
  };
  std::string m = "wrote " + std::to_string(w.count) + " of " + std::to_string(ids.size()) + " tasks";
  if (w.count > 0) m += described(w).substr(std::to_string(w.count).size());
  m += "; refused " + described(r);
  const bool prefix = std::all_of(ids.begin() + static_cast<std::ptrdiff_t>(w.count), ids.end(),
                                  [](const std::string& id) { return id.empty(); });
  if (prefix && w.count > 0) m += " and wrote nothing after the first refused one";
  return m;
}

/// "queue full: wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and wrote
/// nothing after the first refused one: <the server's message>".
std::string partial_batch_message(std::string_view what, const std::vector<std::string>& ids,
                                  const std::string& server_message) {
  return std::string(what) + ": " + batch_outcome(ids) + ": " + server_message;
}

}  // namespace

void Producer::Impl::refuse_batch(const BatchWrite& b, const std::string& failure) {
  const std::vector<std::string>& ids = b.ids;
  if (std::all_of(ids.begin(), ids.end(), [](const auto& id) { return id.empty(); }))
    throw ReplyError(failure);
  throw ReplyError(failure + " (enqueue_batch " + batch_outcome(ids) +
                   replication_of_written(ids, b.generation, b.streams) + ")");
}

std::vector<detail::SharedCommand> Producer::Impl::BatchWrite::commands() {
  std::vector<detail::SharedCommand> c;
  c.reserve(argvs.size());
  for (detail::Argv& a : argvs)
    c.push_back({&a, scripted ? detail::ScriptId::enqueue : detail::not_a_script});
  return c;
}

std::vector<std::string> Producer::Impl::enqueue_many(const std::vector<TaskSpec>& tasks) {
  BatchWrite b;
  build_batch(b, tasks);
  if (tasks.empty()) return {};
  // Without the script, a command sent where its slot no longer is goes again on its own (the
  // shared connection follows it); with it, finish_batch decides what goes again, in order.
  std::vector<detail::Reply> replies = link.run(b.commands(), !b.scripted, &b.generation);
  return finish_batch(b, std::move(replies));
}

void Producer::Impl::build_batch(BatchWrite& b, const std::vector<TaskSpec>& tasks) {
  Impl& im = *this;
  b.ids.resize(tasks.size());
  b.prepared.reserve(tasks.size());
  b.created_at = detail::format_timestamp(std::chrono::system_clock::now());
  b.scripted = im.options.overflow == Overflow::reject;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    Impl::refuse_debounce(tasks[i].options, "enqueue_batch");
    b.prepared.push_back(
        im.prepare(tasks[i].task_type, tasks[i].payload.text(), tasks[i].options, b.ids[i], b.created_at));
    b.scripted = b.scripted || Impl::needs_script(b.prepared.back());
  }
  if (tasks.empty()) return;
  for (const Prepared& t : b.prepared) {
    const std::string& stream = im.keys[static_cast<std::size_t>(t.partition)].stream;
    if (std::find(b.streams.begin(), b.streams.end(), stream) == b.streams.end()) b.streams.push_back(stream);
  }
  if (!b.scripted) {
    b.argvs.reserve(b.prepared.size());
    for (const auto& t : b.prepared) b.argvs.push_back(im.trim_argv(t));
    return;
  }
  // The tasks of each partition together, in batch order (with one partition, as given).
  b.order.resize(b.prepared.size());
  for (std::size_t i = 0; i < b.order.size(); ++i) b.order[i] = i;
  if (im.options.partitions > 1) {
    std::stable_sort(b.order.begin(), b.order.end(), [&](std::size_t x, std::size_t y) {
      return b.prepared[x].partition < b.prepared[y].partition;
    });
    // (With one partition the tasks stay where they are: a second copy of a large batch costs
    // its page faults, measured at a quarter of enqueue_batch's throughput.)
    b.regrouped.reserve(b.prepared.size());
    for (const std::size_t i : b.order) b.regrouped.push_back(std::move(b.prepared[i]));
  }
  const std::vector<Prepared>& grouped = b.grouped();
  // Chunks of at most kChunk tasks of one partition. A partition with more than one chunk has
  // a refusal mark of its own (in its slot): once one of its chunks is refused, every chunk of
  // it behind that one writes nothing (see the enqueue script), so what was written of each
  // partition's tasks is a prefix of them.
  std::vector<std::size_t> per_partition(static_cast<std::size_t>(im.options.partitions), 0);
  for (std::size_t first = 0; first < grouped.size();) {
    std::size_t last = first;
    while (last < grouped.size() && last - first < kChunk &&
           grouped[last].partition == grouped[first].partition) {
      ++last;
    }
    b.chunks.push_back({first, last});
    per_partition[static_cast<std::size_t>(grouped[first].partition)] += last - first;
    first = last;
  }
  const std::string token = detail::new_uuid_v4();
  b.marks.resize(per_partition.size());
  for (std::size_t p = 0; p < per_partition.size(); ++p) {
    if (per_partition[p] > kChunk) b.marks[p] = detail::batch_refused_key(im.keys[p].stream, token);
  }
  // Each chunk's place among its partition's chunks (1, 2, ...): counted in per_partition now.
  std::fill(per_partition.begin(), per_partition.end(), 0);
  b.argvs.reserve(b.chunks.size());
  for (const BatchWrite::Chunk& c : b.chunks) {
    const auto p = static_cast<std::size_t>(grouped[c.first].partition);
    b.argvs.push_back(
        im.script_argv(grouped, c.first, c.last, b.marks[p], static_cast<std::int64_t>(++per_partition[p])));
  }
}

std::vector<std::string> Producer::Impl::finish_batch(BatchWrite& b, std::vector<detail::Reply> replies) {
  Impl& im = *this;
  std::vector<std::string>& ids = b.ids;
  if (!b.scripted) {
    std::string failure;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (!replies[i].view().is_error()) continue;
      if (failure.empty()) failure = std::string(replies[i].view().error());
      ids[i].clear();
    }
    if (!failure.empty()) im.refuse_batch(b, failure);
    im.wait_for_replicas(ids, b.generation, b.streams);
    return std::move(ids);
  }
  const std::vector<Prepared>& grouped = b.grouped();
  const auto& chunks = b.chunks;
  const auto& order = b.order;
  auto task_of = [&](std::size_t k) { return order.empty() ? k : order[k]; };
  const std::size_t partitions = b.marks.size();
  // A chunk that was not run (sent where its slot no longer is: MOVED, ASK, TRYAGAIN; a
  // script cache emptied by a failover or SCRIPT FLUSH: NOSCRIPT), and the chunks of its
  // partition behind it (the enqueue script writes nothing while an earlier chunk of its batch
  // has not run), go again, on their own, in order: what is written stays a prefix in order.
  std::vector<bool> stuck(partitions, false);     // a chunk of it stays unwritten
  std::vector<bool> left(replies.size(), false);  // not run: behind an unwritten chunk
  for (std::size_t c = 0; c < replies.size(); ++c) {
    const auto p = static_cast<std::size_t>(grouped[chunks[c].first].partition);
    const bool not_run = sent_to_wrong_place(replies[c]) || detail::ScriptRunner::is_noscript(replies[c]) ||
                         (replies[c].view().is_integer() && replies[c].view().integer() == kBehindUnrun);
    if (not_run && stuck[p]) {
      left[c] = true;
      continue;
    }
    if (not_run) {
      im.link.run_alone([&](detail::Connection&, detail::ScriptRunner& scripts) {
        replies[c] = scripts.call(detail::ScriptId::enqueue, b.argvs[c]);
      });
    }
    const detail::ReplyView v = replies[c].view();
    if (v.is_error() || v.integer() <= 0) stuck[p] = true;
  }
  std::string server_message;
  std::string failure;  // another error reply: that chunk was not written
  std::optional<Duplicate> duplicate;
  std::size_t duplicate_index = 0;
  for (std::size_t c = 0; c < replies.size(); ++c) {
    if (left[c]) {
      for (std::size_t k = chunks[c].first; k < chunks[c].last; ++k) ids[task_of(k)].clear();
      continue;
    }
    const bool full = is_queue_full(replies[c]);
    auto dup = full ? std::nullopt : parse_duplicate(replies[c]);
    const bool refused = full || dup.has_value();
    if (refused && server_message.empty()) {
      server_message = full ? std::string(replies[c].view().error()) : duplicate_message(*dup);
      if (dup) {
        duplicate = std::move(dup);
        duplicate_index = task_of(chunks[c].first + duplicate->index);
      }
    }
    if (!refused && replies[c].view().is_error() && failure.empty()) {
      failure = std::string(replies[c].view().error());
    }
    if (!refused && !replies[c].view().is_error() && replies[c].view().integer() > 0) continue;  // written
    for (std::size_t k = chunks[c].first; k < chunks[c].last; ++k) ids[task_of(k)].clear();
  }
  if (duplicate) {
    std::string message = partial_batch_message("duplicate task", ids, server_message) +
                          im.replication_of_written(ids, b.generation, b.streams);  // before the move
    throw DuplicateTaskError(message, duplicate->holder, duplicate_index, std::move(ids));
  }
  if (!server_message.empty()) {
    std::string message =
        partial_batch_message("queue full", ids, server_message) +
        im.replication_of_written(ids, b.generation, b.streams);  // before ids is moved from
    throw QueueFullError(message, std::move(ids));
  }
  // Chunks left unwritten without an error of their own (behind one not run, whose mark then
  // expired or was evicted): the batch is refused all the same, never returned as written.
  if (failure.empty() &&
      std::any_of(ids.begin(), ids.end(), [](const std::string& id) { return id.empty(); })) {
    failure =
        "ERR a chunk of the batch was not run and the ones behind it were not written (the batch's mark "
        "expired or was evicted)";
  }
  if (failure.starts_with("BATCHCLOSED")) {
    std::string message = partial_batch_message("batch closed", ids, failure) +
                          im.replication_of_written(ids, b.generation, b.streams);
    throw BatchClosedError(message, std::move(ids));
  }
  if (!failure.empty()) im.refuse_batch(b, failure);
  im.wait_for_replicas(ids, b.generation, b.streams);
  return std::move(ids);
}

}  // namespace streamq
