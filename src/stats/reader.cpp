// SPDX-License-Identifier: MIT
// StatsReader, and the snapshot of one queue read from Redis: two pipelines (XINFO, XLEN,
// ZCARD, XPENDING, ...) and the checks of their replies (detail::read_queue_stats), then the
// tenants' backlogs (two more).
#include "streamq/stats.hpp"

#include <algorithm>
#include <charconv>
#include <functional>
#include <mutex>

#include "redis/connection.hpp"
#include "stats_read.hpp"
#include "streamq/errors.hpp"
#include "wire/keys.hpp"

namespace streamq {
namespace {

StatsOptions validated(StatsOptions o) {
  if (o.stream.empty()) throw ConfigError("stream must not be empty");
  detail::check_partitions(o.partitions, o.stream);
  return o;
}

std::int64_t id_millis(std::string_view id) {
  std::int64_t ms = 0;
  const auto dash = id.find('-');
  const std::string_view part = id.substr(0, dash);
  std::from_chars(part.data(), part.data() + part.size(), ms);
  return ms;
}

/// Largest count or duration (ms) a reply may carry: far above any real queue, and low enough
/// that sums over levels, groups and 1,024 partitions cannot overflow.
constexpr std::int64_t kMostCount = 1'000'000'000'000'000;

/// A count, length or idle time the server sent: an integer in [0, kMostCount], else
/// streamq::Error (a protocol error: no server sends it).
std::int64_t count_of(detail::ReplyView v, const char* what) {
  const std::int64_t n = v.as_int();
  if (n < 0 || n > kMostCount) {
    throw Error(std::string("protocol: unexpected reply from Redis (") + what + " " + std::to_string(n) +
                ")");
  }
  return n;
}

std::optional<std::int64_t> optional_count(detail::ReplyView v, const char* what) {
  if (v.is_nil()) return std::nullopt;
  return count_of(v, what);
}

/// One snapshot of one queue (StatsReader::read, Inspector::stats) on `conn`.
class StatsQuery {
 public:
  explicit StatsQuery(const StatsOptions& o) : options(o), keys(detail::queue_keys(o.stream)) {}

  /// One level from its EXISTS, XINFO STREAM and XINFO GROUPS replies.
  LevelStats read_level(Priority p, const std::string& stream, const detail::Reply& exists,
                        const detail::Reply& info_reply, const detail::Reply& groups_reply,
                        std::int64_t now_ms) const {
    LevelStats l;
    l.priority = p;
    l.level = p == Priority::high ? "high" : p == Priority::low ? "low" : "normal";
    l.stream = stream;
    l.exists = exists.view().integer() == 1;
    if (!l.exists) return l;
    const detail::ReplyView info = info_reply.view().check();
    l.length = count_of(info.field("length"), "length");
    if (auto added = info.field("entries-added"); !added.is_nil())
      l.entries_added = count_of(added, "entries-added");
    if (auto first_entry = info.field("first-entry"); !first_entry.is_nil()) {
      l.oldest_entry_age_ms = std::max<std::int64_t>(0, now_ms - id_millis(first_entry[0].str()));
    }
    const detail::ReplyView groups = groups_reply.view().check();
    bool lag_known = true;
    std::size_t matched = 0;
    std::int64_t lag = 0;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const detail::ReplyView g = groups[i];
      if (!options.group.empty() && g.field("name").str() != options.group) continue;
      ++matched;
      l.pending += count_of(g.field("pending"), "pending");
      const std::optional<std::int64_t> group_lag = optional_count(g.field("lag"), "lag");
      lag_known = lag_known && group_lag.has_value();
      lag += group_lag.value_or(0);
    }
    if (lag_known && matched > 0) l.lag = lag;
    return l;
  }

  /// The first pipeline: the clock, every level's EXISTS, XINFO STREAM and XINFO GROUPS, the
  /// dead letters and the delayed set. (The views point into `keys`.)
  std::vector<detail::Argv> first_commands() const {
    using detail::Argv;
    std::vector<Argv> first;
    first.push_back(Argv{"TIME"});
    first.push_back(Argv{"EXISTS", keys.stream});
    first.push_back(Argv{"XLEN", keys.dlq});
    first.push_back(Argv{"ZCARD", keys.delayed});
    first.push_back(Argv{"XINFO", "STREAM", keys.stream});
    first.push_back(Argv{"XINFO", "GROUPS", keys.stream});
    first.push_back(Argv{"ZRANGE", keys.delayed, "0", "0", "WITHSCORES"});
    // The other levels: EXISTS, XINFO STREAM, XINFO GROUPS each (errors ignored when missing).
    first.push_back(Argv{"XINFO", "STREAM", keys.dlq});  // index 7; "no such key" when none yet
    const std::string* others[] = {&keys.high, &keys.low};
    for (const std::string* level : others) {
      first.push_back(Argv{"EXISTS", *level});
      first.push_back(Argv{"XINFO", "STREAM", *level});
      first.push_back(Argv{"XINFO", "GROUPS", *level});
    }
    return first;
  }

  /// The snapshot from the first pipeline's replies; groups without their consumers yet.
  QueueStats parse_first(const std::vector<detail::Reply>& r) const {
    if (r.size() != kFirstReplies) throw Error("protocol: unexpected reply from Redis (reply count)");
    QueueStats st;
    st.stream = options.stream;
    const detail::ReplyView time = r[0].view().check();
    const std::int64_t seconds = time[0].as_int();
    const std::int64_t micros = time[1].as_int();
    if (seconds < 0 || seconds > kMostCount / 1000 || micros < 0 || micros >= 1'000'000) {
      throw Error("protocol: unexpected reply from Redis (TIME)");
    }
    const std::int64_t now_ms = seconds * 1000 + micros / 1000;
    st.exists = r[1].view().integer() == 1;
    st.dlq_length = count_of(r[2].view(), "XLEN");
    st.delayed = count_of(r[3].view(), "ZCARD");
    if (const detail::ReplyView next = r[6].view().check(); next.size() == 2) {
      // Scores are due times in whole ms, sent back as decimal text.
      const std::string_view score = next[1].str();
      double due = -1;
      const auto [end, ec] = std::from_chars(score.data(), score.data() + score.size(), due);
      if (ec != std::errc() || end != score.data() + score.size() || !(due >= 0 && due <= kMostCount)) {
        throw Error("protocol: unexpected reply from Redis (a delayed task's due time \"" +
                    std::string(score) + "\")");
      }
      st.next_delayed_due_ms = static_cast<std::int64_t>(due);
      st.next_delayed_due_in_ms = *st.next_delayed_due_ms - now_ms;
    }
    if (const detail::ReplyView dlq = r[7].view(); !dlq.is_error()) {
      if (auto added = dlq.field("entries-added"); !added.is_nil()) {
        st.dlq_entries_added = count_of(added, "entries-added");
      }
    }
    LevelStats high = read_level(Priority::high, keys.high, r[8], r[9], r[10], now_ms);
    LevelStats low = read_level(Priority::low, keys.low, r[11], r[12], r[13], now_ms);
    LevelStats normal = read_level(Priority::normal, keys.stream, r[1], r[4], r[5], now_ms);
    st.length = high.length + normal.length + low.length;
    st.pending_total = high.pending + normal.pending + low.pending;
    detail::fill_deprecated_totals(st);
    st.levels = {std::move(high), std::move(normal), std::move(low)};
    if (!st.exists) return st;  // XINFO answered "no such key"; nothing else to read

    const detail::ReplyView info = r[4].view().check();
    if (auto added = info.field("entries-added"); !added.is_nil())
      st.entries_added = count_of(added, "entries-added");
    if (auto first_entry = info.field("first-entry"); !first_entry.is_nil()) {
      st.oldest_entry_id = std::string(first_entry[0].str());
      st.oldest_entry_age_ms = std::max<std::int64_t>(0, now_ms - id_millis(st.oldest_entry_id));
    }

    const detail::ReplyView groups = r[5].view().check();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const detail::ReplyView g = groups[i];
      GroupInfo gi;
      gi.name = std::string(g.field("name").str());
      if (!options.group.empty() && gi.name != options.group) continue;
      gi.pending = count_of(g.field("pending"), "pending");
      gi.last_delivered_id = std::string(g.field("last-delivered-id").str());
      gi.lag = optional_count(g.field("lag"), "lag");
      st.groups.push_back(std::move(gi));
    }
    return st;
  }

  /// The second pipeline: each group's consumers and its oldest pending entry. (The views
  /// point into `st`.)
  std::vector<detail::Argv> group_commands(const QueueStats& st) const {
    std::vector<detail::Argv> per_group;
    for (const GroupInfo& g : st.groups) {
      per_group.push_back(detail::Argv{"XINFO", "CONSUMERS", keys.stream, g.name});
      per_group.push_back(detail::Argv{"XPENDING", keys.stream, g.name, "-", "+", "1"});
    }
    return per_group;
  }

  void parse_groups(QueueStats& st, const std::vector<detail::Reply>& gr) const {
    if (gr.size() != 2 * st.groups.size()) throw Error("protocol: unexpected reply from Redis (reply count)");
    for (std::size_t i = 0; i < st.groups.size(); ++i) {
      GroupInfo& g = st.groups[i];
      const detail::ReplyView consumers = gr[2 * i].view().check();
      for (std::size_t c = 0; c < consumers.size(); ++c) {
        const detail::ReplyView ci = consumers[c];
        g.consumers.push_back(ConsumerInfo{std::string(ci.field("name").str()),
                                           count_of(ci.field("pending"), "pending"),
                                           count_of(ci.field("idle"), "idle")});
      }
      const detail::ReplyView oldest = gr[2 * i + 1].view().check();
      if (oldest.size() > 0) g.oldest_pending_idle_ms = count_of(oldest[0][2], "idle");
    }
  }

  /// QueueStats::backlog_tenants and backlog: the sizes of the tenants' ready and waiting sets
  /// and their first kMostBacklogTenants members, then, when that is all of them, the LLEN of
  /// each one's three backlogs. Both stay unset for a user who may not read those keys.
  void read_backlog(detail::Connection& conn, QueueStats& st) const {
    using detail::Argv;
    const std::string ready = detail::tenants_ready_key(keys.stream);
    const std::string waiting = detail::tenants_waiting_key(keys.stream);
    const std::string last = std::to_string(kMostBacklogTenants - 1);
    std::vector<Argv> reads;
    reads.push_back(Argv{"ZCARD", ready});
    reads.push_back(Argv{"ZCARD", waiting});
    reads.push_back(Argv{"ZRANGE", ready, "0", last});
    reads.push_back(Argv{"ZRANGE", waiting, "0", last});
    const std::vector<detail::Reply> sets = conn.pipeline(reads);
    for (const detail::Reply& r : sets) {
      if (r.view().is_error() && r.view().error().starts_with("NOPERM")) return;  // (documented: unset)
    }
    const std::int64_t tenants =
        count_of(sets[0].view().check(), "ZCARD") + count_of(sets[1].view().check(), "ZCARD");
    st.backlog_tenants = tenants;
    if (tenants == 0) st.backlog = 0;
    if (tenants == 0 || tenants > kMostBacklogTenants) return;
    std::vector<std::string> lists;
    for (const detail::Reply& r : {std::cref(sets[2]), std::cref(sets[3])}) {
      const detail::ReplyView names = r.view().check();
      for (std::size_t i = 0; i < names.size(); ++i) {
        for (Priority p : {Priority::high, Priority::normal, Priority::low}) {
          lists.push_back(detail::tenant_backlog_key(keys.stream, names[i].str(), p));
        }
      }
    }
    std::vector<Argv> lengths;
    lengths.reserve(lists.size());
    for (const std::string& list : lists) lengths.push_back(Argv{"LLEN", list});
    std::int64_t backlog = 0;
    for (const detail::Reply& r : conn.pipeline(lengths)) {
      if (r.view().is_error() && r.view().error().starts_with("NOPERM")) return;
      backlog += count_of(r.view().check(), "LLEN");
    }
    st.backlog = backlog;
  }

  QueueStats read(detail::Connection& conn) const {
    QueueStats st = parse_first(conn.pipeline(first_commands()));
    if (st.exists) parse_groups(st, conn.pipeline(group_commands(st)));
    read_backlog(conn, st);
    return st;
  }

  static constexpr std::size_t kFirstReplies = 14;
  /// Most tenants with a backlog (per partition) whose backlogs a snapshot adds up
  /// (QueueStats::backlog): three LLEN each.
  static constexpr std::int64_t kMostBacklogTenants = 1000;

  const StatsOptions& options;
  detail::QueueKeys keys;
};

}  // namespace

namespace detail {

QueueStats read_queue_stats(Connection& conn, const StatsOptions& options) {
  return StatsQuery(options).read(conn);
}

QueueStats parse_queue_stats(const StatsOptions& options, const std::vector<Reply>& first,
                             const std::vector<Reply>& per_group) {
  const StatsQuery query(options);
  QueueStats st = query.parse_first(first);
  if (st.exists) query.parse_groups(st, per_group);
  return st;
}

}  // namespace detail

struct StatsReader::Impl {
  std::mutex calls;  // held by read(): calls take turns on the connection
  explicit Impl(StatsOptions o)
      : options(validated(std::move(o))),
        conn(detail::make_connection_config(
            options.connection, "stats", detail::partition_stream(options.stream, options.partitions, 0))) {}

  QueueStats read() {
    conn.connect_with_backoff();
    if (options.partitions == 1) return detail::read_queue_stats(conn, options);
    std::vector<QueueStats> parts;
    for (int i = 0; i < options.partitions; ++i) {
      StatsOptions one = options;
      one.stream = detail::partition_stream(options.stream, options.partitions, i);
      one.partitions = 1;
      parts.push_back(detail::read_queue_stats(conn, one));
    }
    return detail::sum_partitions(options.stream, std::move(parts));
  }

  StatsOptions options;
  detail::Connection conn;
};

StatsReader::StatsReader(StatsOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
StatsReader::~StatsReader() = default;
StatsReader::StatsReader(StatsReader&&) noexcept = default;
StatsReader& StatsReader::operator=(StatsReader&&) noexcept = default;

QueueStats StatsReader::read() {
  const std::lock_guard lock(impl_->calls);
  return impl_->read();
}

}  // namespace streamq
