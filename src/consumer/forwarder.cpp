// SPDX-License-Identifier: MIT
#include "forwarder.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "log.hpp"
#include "metrics.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"

namespace streamq::detail {

Forwarder::Forwarder(Shared& shared)
    : s_(shared),
      standby_interval_(std::max(kStandbyInterval, shared.opt.forward_interval)),
      lease_(std::max(kLease, 3 * shared.opt.forward_interval)),
      next_(Clock::now()),
      courier_(shared) {}

void Forwarder::tick(ScriptRunner& scripts, Clock::time_point now) {
  if (poked_.exchange(false) && now < next_) {
    // Woken for the outbox alone (poke): the delayed set waits for its time.
    if (carry(scripts, now)) poked_.store(true);
    return;
  }
  const QueueKeys& keys = s_.keys();
  Argv argv = scripts.begin(ScriptId::forward, 6);
  argv.add(keys.delayed).add(keys.dlq).add(keys.forwarder).add(keys.stream).add(keys.high).add(keys.low);
  argv.add(kMostPerPass).add(s_.consumer_name).add(static_cast<std::int64_t>(lease_.count()));
  const std::string failed_at = format_timestamp(std::chrono::system_clock::now());
  argv.add(failed_at).add(static_cast<std::int64_t>(kMaxFields));
  const Reply reply = scripts.call(ScriptId::forward, argv);
  if (reply.view().is_error()) {
    // "<the server's error> (the forward pass moved <n> before this write failed)": the
    // tasks before the failed write were moved; count them before the error is reported.
    const std::string_view e = reply.view().error();
    constexpr std::string_view kMarker = "(the forward pass moved ";
    std::int64_t moved = 0;
    if (const auto at = e.rfind(kMarker); at != std::string_view::npos) {
      std::from_chars(e.data() + at + kMarker.size(), e.data() + e.size(), moved);
    }
    if (moved > 0) Metrics::add(s_.metrics.forwarded, static_cast<std::uint64_t>(moved));
  }
  const ReplyView r = reply.view().check();
  const std::int64_t moved = r[0].integer();
  const std::int64_t next_due = r[1].integer();
  const bool leader = r[2].integer() == 1;
  if (moved > 0) Metrics::add(s_.metrics.forwarded, static_cast<std::uint64_t>(moved));
  const Millis poll = leader ? s_.opt.forward_interval : standby_interval_;
  // The lease holder also wakes for the next due task if that comes before its poll.
  const Millis wait = leader && next_due >= 0 ? std::min(poll, Millis(next_due)) : poll;
  next_ = moved >= kMostPerPass ? now : now + wait;  // (more are due: on at once)
  if (carry(scripts, now)) next_ = now;
}

bool Forwarder::carry(ScriptRunner& scripts, Clock::time_point now) {
  if (courier_off_) return false;
  FlowCourier::Pass pass;
  try {
    pass = courier_.pass(scripts);
  } catch (const ReplyError& e) {
    if (e.prefix() == "NOPERM") {
      courier_off_ = true;
      log(LogLevel::warning,
          "flow courier of " + s_.keys().stream + " off: this worker's ACL user may not run it (" + e.what() +
              "); the ends of flows' children in other partitions or queues written here are not carried "
              "to their parents (see the ACL lines in docs/operations.md)");
      return false;
    }
    pass.failed = e.what();
  }
  // An entry that cannot be carried now (its partition out of reach) stays for a later pass; the
  // forwarding goes on. Said once in a while, not at every pass.
  if (!pass.failed.empty() && now >= quiet_until_) {
    log(LogLevel::warning, "flow courier: " + pass.failed);
    quiet_until_ = now + kCourierLogEvery;
  }
  // On at once only while full reads carry something: entries that keep failing wait for the
  // next pass at the usual interval.
  return pass.read >= FlowCourier::kMostPerPass && pass.carried > 0;
}

}  // namespace streamq::detail
