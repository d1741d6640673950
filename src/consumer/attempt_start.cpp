// SPDX-License-Identifier: MIT
// The start of an attempt: the start script of suspects, and the fields (a tracked task's, for
// its start mark) and deadline a start reads of its task.
#include <charconv>
#include <chrono>
#include <optional>

#include "attempt.hpp"
#include "log.hpp"
#include "redis/scripts.hpp"
#include "wire/fate_args.hpp"

namespace streamq::detail {

Start start_suspect(const Shared& s, Work& w, std::unique_ptr<Channel>& ch) {
  try {
    if (!ch) ch = std::make_unique<Channel>(s.connection);
    Argv argv = ch->scripts.begin(ScriptId::start, 1);
    argv.add(s.keys(w.key.stream).stream).add(s.opt.group).add(s.consumer_name).add(w.key.id);
    argv.add(w.deliveries + 1).add(s.opt.stream);
    const Reply r = ch->scripts.call(ScriptId::start, argv);
    const std::int64_t result = r.view().check().integer();
    if (result == start_not_owner) {
      log(LogLevel::warning, "entry " + w.key.id + " was taken by another consumer before it started");
      return Start::not_ours;
    }
    if (result == start_body_gone) return Start::gone;
    if (result == start_cancelled) {
      Metrics::add(s.metrics.cancelled, 1);
      log(LogLevel::info,
          "entry " + w.key.id + " was cancelled by an operator before it started; it ended cancelled");
      return Start::not_ours;
    }
  } catch (const std::exception& e) {
    // Running it anyway keeps at-least-once; only this attempt goes uncounted.
    log(LogLevel::warning, "could not count the start of entry " + w.key.id + ": " + e.what());
  }
  w.deliveries += 1;
  return Start::run;
}

Fields tracking_fields(const Task& task) {
  Fields f{{std::string(field::task_id), task.id()}, {std::string(field::task_type), task.type()}};
  if (const auto retention = task.field(field::retention)) f.emplace_back(field::retention, *retention);
  // A flow's child: its end updates its parent (lib/flows.lua).
  if (const auto parent = task.field(field::flow_parent)) {
    f.emplace_back(field::flow_parent, *parent);
    f.emplace_back(field::flow_on_failure, task.field(field::flow_on_failure).value_or("fail"));
    if (const auto home = task.field(field::flow_home)) f.emplace_back(field::flow_home, *home);
  }
  // A batch's task: its end is counted in its batch.
  if (const auto batch = task.field(field::batch_id)) f.emplace_back(field::batch_id, *batch);
  // A tenant's task: its end gives its tenant's slot back (lib/tenants.lua).
  if (const auto tenant = task.field(field::tenant)) f.emplace_back(field::tenant, *tenant);
  return f;
}

std::optional<std::chrono::system_clock::time_point> deadline_of(const Task& task) {
  const auto text = task.field(field::deadline);
  if (!text) return std::nullopt;
  std::int64_t ms = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), ms);
  if (ec != std::errc() || end != text->data() + text->size()) return std::nullopt;
  // (Not a value a producer writes: up to 2200-01-01, within the clock's range.)
  constexpr std::int64_t kLatest = 7258118400000;
  if (ms < 0 || ms > kLatest) return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

}  // namespace streamq::detail
