// SPDX-License-Identifier: MIT
#include "streamq/producer.hpp"

#include <algorithm>

#include "codec.hpp"
#include "connection.hpp"
#include "keys.hpp"
#include "scripts.hpp"
#include "streamq/errors.hpp"

namespace streamq {
namespace {

constexpr std::size_t kChunk = 64;  // tasks per enqueue script call: small enough that Redis runs one
                                    // chunk while the next is formatted (measured: 64 beats 16-256)

ProducerOptions validated(ProducerOptions o) {
  if (o.stream.empty()) throw ConfigError("stream must not be empty");
  if (o.max_len <= 0) throw ConfigError("max_len must be > 0");
  if (o.overflow != Overflow::reject && o.overflow != Overflow::trim_oldest) {
    throw ConfigError("overflow must be Overflow::reject or Overflow::trim_oldest");
  }
  if (o.max_payload_bytes == 0) throw ConfigError("max_payload_bytes must be > 0");
  if (o.max_payload_depth < 1) throw ConfigError("max_payload_depth must be >= 1");
  if (o.default_max_retries < 0) throw ConfigError("default_max_retries must be >= 0");
  return o;
}

bool is_queue_full(const detail::Reply& r) {
  return r.view().is_error() && r.view().error().starts_with("QUEUEFULL");
}

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

/// "queue full: wrote 64 of 150 tasks (indices 0-63); refused 86 (indices 64-149) and wrote
/// nothing after the first refused one: <the server's message>".
std::string partial_batch_message(const std::vector<std::string>& ids, const std::string& server_message) {
  const IndexRanges w = index_ranges(ids, true);
  const IndexRanges r = index_ranges(ids, false);
  auto described = [](const IndexRanges& x) {
    if (x.count == 0) return std::string("0");
    return std::to_string(x.count) + (x.count == 1 ? " (index " : " (indices ") + x.text + ")";
  };
  std::string m =
      "queue full: wrote " + std::to_string(w.count) + " of " + std::to_string(ids.size()) + " tasks";
  if (w.count > 0) m += described(w).substr(std::to_string(w.count).size());
  m += "; refused " + described(r);
  const bool prefix = std::all_of(ids.begin() + static_cast<std::ptrdiff_t>(w.count), ids.end(),
                                  [](const std::string& id) { return id.empty(); });
  if (prefix && w.count > 0) m += " and wrote nothing after the first refused one";
  return m + ": " + server_message;
}

}  // namespace

struct Producer::Impl {
  explicit Impl(ProducerOptions o)
      : options(validated(std::move(o))),
        conn(detail::make_connection_config(options.connection, "producer")),
        scripts(conn),
        max_len_text(std::to_string(options.max_len)) {}

  /// Checks one task and its per-call options; throws before anything is sent.
  detail::NewTask prepare(std::string_view type, std::string_view payload, const EnqueueOptions& eo,
                          std::string& id_storage, std::string_view created_at) const {
    if (type.empty()) throw ConfigError("task_type must not be empty");
    if (eo.max_retries && *eo.max_retries < 0) throw ConfigError("max_retries must be >= 0");
    for (const auto& [name, value] : eo.extra_fields) {
      if (name.empty() || detail::is_reserved_field(name)) {
        throw ConfigError("extra field name \"" + name + "\" is empty or reserved");
      }
    }
    if (auto problem =
            detail::payload_problem(payload, options.max_payload_bytes, options.max_payload_depth)) {
      throw PayloadError(*problem);
    }
    id_storage = eo.task_id.empty() ? detail::new_uuid_v4() : eo.task_id;
    return detail::NewTask{
        id_storage,      type, payload, created_at, eo.max_retries.value_or(options.default_max_retries),
        &eo.extra_fields};
  }

  /// XADD <stream> MAXLEN ~ <max_len> * fields... (the seed's command).
  detail::Argv trim_argv(const detail::NewTask& t) const {
    detail::Argv argv{"XADD", options.stream, "MAXLEN", "~", max_len_text, "*"};
    detail::append_new_task(argv, t);
    return argv;
  }

  /// One enqueue script call for tasks [first, last); `refusal_mark` (the batch's, see the
  /// enqueue script) is empty for a call that is a whole batch.
  detail::Argv reject_argv(const std::vector<detail::NewTask>& tasks, std::size_t first, std::size_t last,
                           const std::string& refusal_mark = {}) const {
    detail::Argv argv = scripts.begin(detail::ScriptId::enqueue, refusal_mark.empty() ? 1 : 2);
    argv.add(options.stream);
    if (!refusal_mark.empty()) argv.add(refusal_mark);
    argv.add(max_len_text).add(static_cast<std::int64_t>(last - first));
    for (std::size_t i = first; i < last; ++i) {
      argv.add(static_cast<std::int64_t>(detail::new_task_string_count(tasks[i])));
      detail::append_new_task(argv, tasks[i]);
    }
    return argv;
  }

  ProducerOptions options;
  detail::Connection conn;
  detail::ScriptRunner scripts;
  std::string max_len_text;
};

Producer::Producer(ProducerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Producer::~Producer() = default;
Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&&) noexcept = default;

const ProducerOptions& Producer::options() const noexcept { return impl_->options; }

std::string Producer::enqueue(std::string_view task_type, std::string_view payload_json,
                              const EnqueueOptions& options) {
  Impl& im = *impl_;
  std::string id;
  const std::string created_at = detail::format_timestamp(std::chrono::system_clock::now());
  const detail::NewTask task = im.prepare(task_type, payload_json, options, id, created_at);
  im.conn.connect_with_backoff();
  detail::Reply reply;
  if (im.options.overflow == Overflow::trim_oldest) {
    reply = im.conn.command(im.trim_argv(task));
  } else {
    std::vector<detail::NewTask> one{task};
    detail::Argv argv = im.reject_argv(one, 0, 1);
    reply = im.scripts.call(detail::ScriptId::enqueue, argv);
  }
  if (is_queue_full(reply)) throw QueueFullError(std::string(reply.view().error()));
  reply.view().check();
  return id;
}

std::vector<std::string> Producer::enqueue_batch(const std::vector<TaskSpec>& tasks) {
  Impl& im = *impl_;
  std::vector<std::string> ids(tasks.size());
  std::vector<detail::NewTask> prepared;
  prepared.reserve(tasks.size());
  const std::string created_at = detail::format_timestamp(std::chrono::system_clock::now());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    prepared.push_back(
        im.prepare(tasks[i].task_type, tasks[i].payload.text(), tasks[i].options, ids[i], created_at));
  }
  if (tasks.empty()) return ids;
  im.conn.connect_with_backoff();

  if (im.options.overflow == Overflow::trim_oldest) {
    std::vector<detail::Argv> argvs;
    argvs.reserve(prepared.size());
    for (const auto& t : prepared) argvs.push_back(im.trim_argv(t));
    const std::vector<detail::Reply> replies = im.conn.pipeline(argvs);
    for (const auto& r : replies) r.view().check();
    return ids;
  }

  // Each chunk goes on the wire as soon as it is built, so Redis runs chunk k while the
  // next one is being formatted. A refused chunk marks the batch refused, and every chunk
  // behind it then writes nothing (see the enqueue script): what was written is a prefix.
  const std::string mark = prepared.size() > kChunk
                               ? detail::batch_refused_key(im.options.stream, detail::new_uuid_v4())
                               : std::string();
  std::vector<detail::Argv> argvs;
  std::vector<detail::ScriptId> script_ids;
  for (std::size_t first = 0; first < prepared.size(); first += kChunk) {
    argvs.push_back(im.reject_argv(prepared, first, std::min(prepared.size(), first + kChunk), mark));
    script_ids.push_back(detail::ScriptId::enqueue);
    im.conn.append(argvs.back());
    im.conn.flush();
  }
  const std::vector<detail::Reply> replies = im.scripts.collect(script_ids, argvs);
  std::string server_message;
  for (std::size_t c = 0; c < replies.size(); ++c) {
    const bool refused = is_queue_full(replies[c]);
    if (refused && server_message.empty()) server_message = std::string(replies[c].view().error());
    if (!refused && replies[c].view().check().integer() > 0) continue;  // written
    const std::size_t first = c * kChunk;
    const std::size_t last = std::min(ids.size(), first + kChunk);
    std::fill(ids.begin() + static_cast<std::ptrdiff_t>(first),
              ids.begin() + static_cast<std::ptrdiff_t>(last), std::string());
  }
  if (!server_message.empty()) {
    std::string message = partial_batch_message(ids, server_message);  // before ids is moved from
    throw QueueFullError(message, std::move(ids));
  }
  return ids;
}

}  // namespace streamq
