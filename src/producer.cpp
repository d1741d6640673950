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
    if (auto problem = detail::payload_problem(payload, options.max_payload_bytes,
                                               options.max_payload_depth)) {
      throw PayloadError(*problem);
    }
    id_storage = eo.task_id.empty() ? detail::new_uuid_v4() : eo.task_id;
    return detail::NewTask{id_storage, type, payload, created_at,
                           eo.max_retries.value_or(options.default_max_retries), &eo.extra_fields};
  }

  /// XADD <stream> MAXLEN ~ <max_len> * fields... (the seed's command).
  detail::Argv trim_argv(const detail::NewTask& t) const {
    detail::Argv argv{"XADD", options.stream, "MAXLEN", "~", max_len_text, "*"};
    detail::append_new_task(argv, t);
    return argv;
  }

  /// One enqueue script call for tasks [first, last).
  detail::Argv reject_argv(const std::vector<detail::NewTask>& tasks, std::size_t first,
                           std::size_t last) const {
    detail::Argv argv = scripts.begin(detail::ScriptId::enqueue, 1);
    argv.add(options.stream).add(max_len_text).add(static_cast<std::int64_t>(last - first));
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
    prepared.push_back(im.prepare(tasks[i].task_type, tasks[i].payload.text(), tasks[i].options, ids[i], created_at));
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
  // next one is being formatted.
  std::vector<detail::Argv> argvs;
  std::vector<detail::ScriptId> script_ids;
  for (std::size_t first = 0; first < prepared.size(); first += kChunk) {
    argvs.push_back(im.reject_argv(prepared, first, std::min(prepared.size(), first + kChunk)));
    script_ids.push_back(detail::ScriptId::enqueue);
    im.conn.append(argvs.back());
    im.conn.flush();
  }
  const std::vector<detail::Reply> replies = im.scripts.collect(script_ids, argvs);
  std::string full_message;
  for (std::size_t c = 0; c < replies.size(); ++c) {
    if (is_queue_full(replies[c])) {
      if (full_message.empty()) full_message = std::string(replies[c].view().error());
      const std::size_t first = c * kChunk;
      const std::size_t last = std::min(ids.size(), first + kChunk);
      std::fill(ids.begin() + static_cast<std::ptrdiff_t>(first),
                ids.begin() + static_cast<std::ptrdiff_t>(last), std::string());
      continue;
    }
    replies[c].view().check();
  }
  if (!full_message.empty()) throw QueueFullError(full_message, std::move(ids));
  return ids;
}

}  // namespace streamq
