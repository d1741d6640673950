// SPDX-License-Identifier: MIT
#include "orphan_records.hpp"

#include <string>

#include "log.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

namespace {

constexpr std::int64_t kMostPerCall = 100;

}  // namespace

std::int64_t settle_orphan_records(Shared& s, ScriptRunner& scripts, std::uint16_t stream) {
  const QueueKeys& keys = s.keys(stream);
  Argv argv = scripts.begin(ScriptId::settle_orphans, 3);
  argv.add(keys.stream).add(keys.dlq).add_copy(orphans_key(keys.stream));
  argv.add(s.opt.stream).add(static_cast<std::int64_t>(s.opt.claim_min_idle.count())).add(kMostPerCall);
  const std::int64_t ended = scripts.call(ScriptId::settle_orphans, argv).view().check().integer();
  if (ended > 0) {
    log(LogLevel::warning, std::to_string(ended) + " tasks of " + keys.stream +
                               " whose entries were deleted while their handlers ran ended dead: their "
                               "holders are gone (or were cut off for claim_min_idle), and their "
                               "dead-letter records are their fate");
  }
  return ended;
}

}  // namespace streamq::detail
