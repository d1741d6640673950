// SPDX-License-Identifier: MIT
#include "pending.hpp"

#include <chrono>

#include "log.hpp"
#include "wire/codec.hpp"

namespace streamq::detail {
namespace {

/// Reads [f1, v1, f2, v2, ...] into fields; false when the array is malformed.
bool read_fields(ReplyView v, Fields& out) {
  if (!v.is_array() || v.size() % 2 != 0) return false;
  const std::size_t n = v.size();
  out.reserve(n / 2);
  for (std::size_t i = 0; i < n; i += 2) {
    if (!v[i].is_string() || !v[i + 1].is_string()) return false;
    out.emplace_back(v[i].str(), v[i + 1].str());
  }
  return true;
}

}  // namespace

Work read_entry(ReplyView entry, std::uint16_t stream, std::int64_t deliveries, Origin origin) {
  Work w;
  w.key = EntryKey{stream, std::string(entry[0].str())};
  w.deliveries = deliveries;
  w.origin = origin;
  if (!entry[1].is_nil()) {
    auto fields = std::make_shared<Fields>();
    if (read_fields(entry[1], *fields)) w.fields = std::move(fields);
  }
  return w;
}

PendingBatch fetch_pending(Shared& s, ScriptRunner& scripts, std::uint16_t stream, PendingMode mode,
                           const std::string& cursor, std::size_t count) {
  const QueueKeys& keys = s.keys(stream);
  const std::vector<std::string> held = s.inflight.held_ids(stream);
  const std::string failed_at = format_timestamp(std::chrono::system_clock::now());
  Argv argv = scripts.begin(ScriptId::fetch_pending, 2);
  argv.add(keys.stream).add(keys.dlq);
  argv.add(s.opt.group).add(s.consumer_name).add(mode == PendingMode::own ? "own" : "auto").add(cursor);
  argv.add(static_cast<std::int64_t>(count)).add(static_cast<std::int64_t>(s.opt.claim_min_idle.count()));
  argv.add(static_cast<std::int64_t>(s.opt.max_deliveries)).add(failed_at);
  argv.add(static_cast<std::int64_t>(kMaxFields)).add(s.opt.stream);
  for (const auto& id : held) argv.add(id);
  const Reply reply = scripts.call(ScriptId::fetch_pending, argv);
  const ReplyView r = reply.view().check();
  PendingBatch batch;
  batch.cursor = std::string(r[0].str());
  const ReplyView entries = r[1];
  const Origin origin = mode == PendingMode::own ? Origin::replayed : Origin::reclaimed;
  batch.works.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    batch.works.push_back(read_entry(entries[i], stream, entries[i][2].integer(), origin));
  }
  batch.dead = r[2].integer();
  if (const std::int64_t cancelled = r[3].integer(); cancelled > 0) {
    Metrics::add(s.metrics.cancelled, static_cast<std::uint64_t>(cancelled));
    log(LogLevel::info, std::to_string(cancelled) + " pending entries of " + keys.stream +
                            " were cancelled by an operator while nobody ran them; they ended cancelled");
  }
  if (batch.dead > 0) {
    Metrics::add(s.metrics.dead_lettered, static_cast<std::uint64_t>(batch.dead));
    log(LogLevel::warning, std::to_string(batch.dead) + " pending entries of " + keys.stream +
                               " dead-lettered (body lost, or started " +
                               std::to_string(s.opt.max_deliveries) + " times without finishing)");
  }
  return batch;
}

}  // namespace streamq::detail
