// SPDX-License-Identifier: MIT
#include "janitor.hpp"

#include <algorithm>

#include "log.hpp"

namespace streamq::detail {
namespace {

constexpr std::int64_t kMostPerCall = 100;  // keeps one call short on a group with thousands

}  // namespace

Janitor::Janitor(Shared& shared)
    : s_(shared),
      next_(shared.opt.idle_consumer_timeout.count() > 0 ? Clock::now() : Clock::time_point::max()) {}

Millis Janitor::interval(Millis timeout) {
  return std::clamp(timeout / 4, Millis(1), Millis(std::chrono::minutes(5)));
}

void Janitor::tick(ScriptRunner& scripts, Clock::time_point now) {
  // Membership is per stream: a consumer is removed from the group of each level it is idle in.
  bool full = false;
  for (std::uint16_t level = 0; level < s_.stream_count(); ++level) {
    const QueueKeys& keys = s_.keys(level);
    Argv argv = scripts.begin(ScriptId::forget_idle_consumers, 1);
    argv.add(keys.stream).add(s_.opt.group).add(s_.consumer_name);
    argv.add(static_cast<std::int64_t>(s_.opt.idle_consumer_timeout.count())).add(kMostPerCall);
    const Reply reply = scripts.call(ScriptId::forget_idle_consumers, argv);
    const ReplyView v = reply.view();
    // A level nobody enqueued to since its stream was deleted: no group there, nobody to forget.
    if (v.is_error() && v.error().starts_with("NOGROUP")) continue;
    const ReplyView removed = v.check();
    if (removed.size() > 0) {
      Metrics::add(s_.metrics.consumers_removed, removed.size());
      std::string names;
      for (std::size_t i = 0; i < removed.size(); ++i)
        names += (i ? ", " : "") + std::string(removed[i].str());
      log(LogLevel::info, "removed " + std::to_string(removed.size()) + " consumers idle for over " +
                              std::to_string(s_.opt.idle_consumer_timeout.count()) +
                              " ms without pending entries from group " + s_.opt.group + " of " +
                              keys.stream + ": " + names);
    }
    full = full || static_cast<std::int64_t>(removed.size()) >= kMostPerCall;
  }
  // A full call may have left more behind: go on soon.
  next_ = now + (full ? Millis(100) : interval(s_.opt.idle_consumer_timeout));
}

}  // namespace streamq::detail
