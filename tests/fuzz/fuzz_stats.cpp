// SPDX-License-Identifier: MIT
// Fuzz target: the Stats parser (XINFO STREAM, XINFO GROUPS, XINFO CONSUMERS, XPENDING, TIME,
// ZRANGE ... WITHSCORES replies), as StatsReader, the Inspector, the exporter and the dashboard
// read them. Arbitrary bytes from a "server" go through hiredis' reader; the first 14 replies
// stand for the first pipeline, the rest for the per-group one. The parse must give a snapshot
// whose numbers hold together, or throw streamq::Error; nothing else may escape, crash,
// overflow or leak. The snapshot is then summed as partitions and written as JSON.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include "redis/reply.hpp"
#include "stats/stats_read.hpp"
#include "streamq/errors.hpp"

namespace {

using namespace streamq;

struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};

void require(bool ok) {
  if (!ok) std::abort();  // a snapshot that breaks its own rules: a finding
}

/// Every complete reply of `bytes` (stops at a protocol error).
std::vector<detail::Reply> replies_of(std::string_view bytes) {
  std::unique_ptr<redisReader, ReaderDeleter> reader(redisReaderCreate());
  std::vector<detail::Reply> out;
  if (redisReaderFeed(reader.get(), bytes.data(), bytes.size()) != REDIS_OK) return out;
  for (;;) {
    void* r = nullptr;
    if (redisReaderGetReply(reader.get(), &r) != REDIS_OK || r == nullptr) return out;
    out.emplace_back(static_cast<redisReply*>(r));
  }
}

/// An aggregate header ('*') with a count of 7 or more digits: hiredis 0.14 allocates its
/// element array up front, uncapped (see fuzz_resp). The server is trusted not to send those;
/// other numbers (a TIME, an entry id, a score) may be long.
bool has_huge_aggregate(std::string_view s) {
  for (std::size_t at = s.find('*'); at != std::string_view::npos; at = s.find('*', at + 1)) {
    std::size_t digits = 0;
    while (at + 1 + digits < s.size() && std::isdigit(static_cast<unsigned char>(s[at + 1 + digits])) != 0)
      ++digits;
    if (digits >= 7) return true;
  }
  return false;
}

void check(const QueueStats& st) {
  require(st.length >= 0 && st.pending_total >= 0 && st.dlq_length >= 0 && st.delayed >= 0);
  require(st.length >= st.levels.at(1).length && st.pending_total >= st.levels.at(1).pending);
  for (const GroupInfo& g : st.groups) {
    require(g.pending >= 0);
    for (const ConsumerInfo& c : g.consumers) require(c.pending >= 0 && c.idle_ms >= 0);
  }
  if (st.oldest_entry_age_ms) require(*st.oldest_entry_age_ms >= 0);
  require(!st.to_json().empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The first byte picks the group filter: none, or "workers" (StatsOptions::group).
  if (size == 0) return 0;
  const bool filtered = (data[0] & 1) != 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (has_huge_aggregate(bytes)) return 0;
  std::vector<detail::Reply> all = replies_of(bytes);
  const std::size_t split = std::min<std::size_t>(all.size(), 14);
  std::vector<detail::Reply> first;
  std::vector<detail::Reply> per_group;
  for (std::size_t i = 0; i < all.size(); ++i) (i < split ? first : per_group).push_back(std::move(all[i]));
  StatsOptions options;
  options.stream = "q";
  if (filtered) options.group = "workers";
  try {
    QueueStats st = detail::parse_queue_stats(options, first, per_group);
    check(st);
    QueueStats copy = st;
    const QueueStats sum = detail::sum_partitions("q", {std::move(st), std::move(copy)});
    check(sum);
  } catch (const Error&) {
    // refused as a reply of the wrong shape: what bad input must get
  }
  return 0;
}
