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
  const QueueKeys& keys = s_.keys();
  Argv argv = scripts.begin(ScriptId::forget_idle_consumers, 1);
  argv.add(keys.stream).add(s_.opt.group).add(s_.opt.consumer_name);
  argv.add(static_cast<std::int64_t>(s_.opt.idle_consumer_timeout.count())).add(kMostPerCall);
  const Reply reply = scripts.call(ScriptId::forget_idle_consumers, argv);
  const ReplyView removed = reply.view().check();
  if (removed.size() > 0) {
    Metrics::add(s_.metrics.consumers_removed, removed.size());
    std::string names;
    for (std::size_t i = 0; i < removed.size(); ++i) names += (i ? ", " : "") + std::string(removed[i].str());
    log(LogLevel::info, "removed " + std::to_string(removed.size()) + " consumers idle for over " +
                            std::to_string(s_.opt.idle_consumer_timeout.count()) +
                            " ms without pending entries from group " + s_.opt.group + ": " + names);
  }
  // A full call may have left more behind: go on soon.
  next_ = now + (static_cast<std::int64_t>(removed.size()) >= kMostPerCall
                     ? Millis(100)
                     : interval(s_.opt.idle_consumer_timeout));
}

}  // namespace streamq::detail
