// SPDX-License-Identifier: MIT
#include "streamq/stats.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

#include <nlohmann/json.hpp>

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

template <class T>
void keep_max(std::optional<T>& into, const std::optional<T>& v) {
  if (v && (!into || *v > *into)) into = v;
}

template <class T>
void keep_min(std::optional<T>& into, const std::optional<T>& v) {
  if (v && (!into || *v < *into)) into = v;
}

/// A sum of lags: unknown as soon as one of them is.
void add_lag(std::optional<std::int64_t>& into, const std::optional<std::int64_t>& v) {
  into = into && v ? std::optional<std::int64_t>(*into + *v) : std::nullopt;
}

void add_group(std::vector<GroupInfo>& groups, GroupInfo g) {
  g.last_delivered_id.clear();  // no one id stands for several streams
  auto it = std::find_if(groups.begin(), groups.end(), [&](const GroupInfo& x) { return x.name == g.name; });
  if (it == groups.end()) {
    groups.push_back(std::move(g));
    return;
  }
  it->pending += g.pending;
  add_lag(it->lag, g.lag);
  keep_max(it->oldest_pending_idle_ms, g.oldest_pending_idle_ms);
  for (ConsumerInfo& c : g.consumers) {
    auto ct = std::find_if(it->consumers.begin(), it->consumers.end(),
                           [&](const ConsumerInfo& x) { return x.name == c.name; });
    if (ct == it->consumers.end()) {
      it->consumers.push_back(std::move(c));
    } else {
      ct->pending += c.pending;
      ct->idle_ms = std::min(ct->idle_ms, c.idle_ms);  // it read one partition that recently
    }
  }
}

}  // namespace

namespace detail {

QueueStats sum_partitions(const std::string& queue, std::vector<QueueStats> parts) {
  QueueStats total;
  total.stream = queue;
  total.partitions = static_cast<int>(parts.size());
  const detail::QueueKeys names = detail::queue_keys(queue);
  for (QueueStats& p : parts) {
    total.exists = total.exists || p.exists;
    total.length += p.length;
    total.entries_added += p.entries_added;
    total.pending_total += p.pending_total;
    total.dlq_length += p.dlq_length;
    total.dlq_entries_added += p.dlq_entries_added;
    total.delayed += p.delayed;
    total.total_length += p.total_length;
    total.total_pending += p.total_pending;
    keep_min(total.next_delayed_due_ms, p.next_delayed_due_ms);
    keep_min(total.next_delayed_due_in_ms, p.next_delayed_due_in_ms);
    if (p.oldest_entry_age_ms &&
        (!total.oldest_entry_age_ms || *p.oldest_entry_age_ms > *total.oldest_entry_age_ms)) {
      total.oldest_entry_age_ms = p.oldest_entry_age_ms;
      total.oldest_entry_id = p.oldest_entry_id;
    }
    for (GroupInfo& g : p.groups) add_group(total.groups, std::move(g));
    if (total.levels.empty()) {
      total.levels = std::move(p.levels);
      for (LevelStats& l : total.levels) l.stream = detail::priority_stream(names, l.priority);
      continue;
    }
    for (std::size_t i = 0; i < total.levels.size() && i < p.levels.size(); ++i) {
      LevelStats& l = total.levels[i];
      l.exists = l.exists || p.levels[i].exists;
      l.length += p.levels[i].length;
      l.entries_added += p.levels[i].entries_added;
      l.pending += p.levels[i].pending;
      add_lag(l.lag, p.levels[i].lag);
      keep_max(l.oldest_entry_age_ms, p.levels[i].oldest_entry_age_ms);
    }
  }
  return total;
}

}  // namespace detail

namespace {

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

// Prometheus label values escape backslash, double quote and newline.
std::string label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

/// Prometheus text format. Values are written exactly: integers as integers and
/// millisecond durations as seconds with three decimals (a double through an ostream would
/// round 1234567 to 1.23457e+06).
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ << "# HELP " << name << ' ' << help << '\n' << "# TYPE " << name << ' ' << type << '\n';
  }
  void sample(std::string_view name, Labels labels, std::int64_t value) {
    begin(name, labels);
    out_ << value << '\n';
  }
  void sample_seconds(std::string_view name, Labels labels, std::int64_t millis) {
    begin(name, labels);
    millis = std::max<std::int64_t>(millis, 0);  // durations; a skewed clock must not go negative
    const std::int64_t frac = millis % 1000;
    out_ << millis / 1000 << '.' << (frac < 100 ? "0" : "") << (frac < 10 ? "0" : "") << frac << '\n';
  }
  std::string str() const { return out_.str(); }

 private:
  void begin(std::string_view name, Labels labels) {
    out_ << name << '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out_ << ',';
      first = false;
      out_ << k << "=\"" << label_value(v) << '"';
    }
    out_ << "} ";
  }

  std::ostringstream out_;
};

}  // namespace

std::string QueueStats::to_json() const {
  using nlohmann::json;
  json groups_json = json::array();
  std::int64_t consumers_total = 0;
  for (const GroupInfo& g : groups) {
    json consumers_json = json::array();
    for (const ConsumerInfo& c : g.consumers) {
      consumers_json.push_back({{"name", c.name}, {"pending", c.pending}, {"idle_ms", c.idle_ms}});
    }
    consumers_total += static_cast<std::int64_t>(g.consumers.size());
    groups_json.push_back({{"name", g.name},
                           {"pending", g.pending},
                           {"lag", g.lag ? json(*g.lag) : json(nullptr)},
                           {"last_delivered_id", g.last_delivered_id},
                           {"consumers", consumers_json},
                           {"oldest_pending_idle_ms",
                            g.oldest_pending_idle_ms ? json(*g.oldest_pending_idle_ms) : json(nullptr)}});
  }
  json levels_json = json::array();
  for (const LevelStats& l : levels) {
    levels_json.push_back(
        {{"level", l.level},
         {"stream", l.stream},
         {"exists", l.exists},
         {"length", l.length},
         {"entries_added", l.entries_added},
         {"pending", l.pending},
         {"lag", l.lag ? json(*l.lag) : json(nullptr)},
         {"oldest_entry_age_ms", l.oldest_entry_age_ms ? json(*l.oldest_entry_age_ms) : json(nullptr)}});
  }
  const json doc = {
      {"stream", stream},
      {"partitions", partitions},
      {"exists", exists},
      {"queue_length", length},
      {"entries_added", entries_added},
      {"pending_total", pending_total},
      {"consumers_active", consumers_total},
      {"dlq_length", dlq_length},
      {"dlq_entries_added", dlq_entries_added},
      {"delayed", delayed},
      {"next_delayed_due_ms", next_delayed_due_ms ? json(*next_delayed_due_ms) : json(nullptr)},
      {"next_delayed_due_in_ms", next_delayed_due_in_ms ? json(*next_delayed_due_in_ms) : json(nullptr)},
      {"oldest_message", oldest_entry_id.empty() ? json(nullptr) : json(oldest_entry_id)},
      {"oldest_entry_age_ms", oldest_entry_age_ms ? json(*oldest_entry_age_ms) : json(nullptr)},
      {"groups", groups_json},
      {"levels", levels_json},
      {"total_length", total_length},
      {"total_pending", total_pending},
  };
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string QueueStats::to_prometheus() const {
  return streamq::to_prometheus(std::vector<QueueStats>{*this});
}

std::string to_prometheus(const std::vector<QueueStats>& queues) {
  Exposition e;
  // Each family once (a second # HELP/# TYPE of a name is a parse error), with every queue's samples.
  const auto each = [&](auto&& write) {
    for (const QueueStats& q : queues) write(q, std::string_view(q.stream));
  };
  e.family("streamq_stream_length", "gauge", "Entries in the stream (unfinished tasks).");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_stream_length", {{"stream", s}}, q.length);
  });
  e.family("streamq_entries_added_total", "counter", "Entries ever added to the stream.");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_entries_added_total", {{"stream", s}}, q.entries_added);
  });
  e.family("streamq_pending", "gauge", "Delivered, unacknowledged entries over all groups.");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_pending", {{"stream", s}}, q.pending_total);
  });
  e.family("streamq_dlq_length", "gauge", "Entries in the dead-letter stream.");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_dlq_length", {{"stream", s}}, q.dlq_length);
  });
  e.family("streamq_dlq_entries_added_total", "counter",
           "Entries ever added to the dead-letter stream (tasks dead-lettered; 0 when unknown).");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_dlq_entries_added_total", {{"stream", s}}, q.dlq_entries_added);
  });
  e.family("streamq_delayed", "gauge", "Tasks waiting in the delayed set.");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_delayed", {{"stream", s}}, q.delayed);
  });
  if (std::any_of(queues.begin(), queues.end(),
                  [](const QueueStats& q) { return q.next_delayed_due_in_ms.has_value(); })) {
    e.family("streamq_delayed_next_due_seconds", "gauge",
             "Time until the next delayed task is due (negative: overdue).");
    each([&](const QueueStats& q, std::string_view s) {
      if (q.next_delayed_due_in_ms)
        e.sample_seconds("streamq_delayed_next_due_seconds", {{"stream", s}}, *q.next_delayed_due_in_ms);
    });
  }
  e.family("streamq_oldest_entry_age_seconds", "gauge", "Age of the oldest entry in the stream.");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample_seconds("streamq_oldest_entry_age_seconds", {{"stream", s}}, q.oldest_entry_age_ms.value_or(0));
  });

  e.family("streamq_level_length", "gauge", "Entries in a priority level's stream (unfinished tasks).");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& l : q.levels)
      e.sample("streamq_level_length", {{"stream", s}, {"level", l.level}}, l.length);
  });
  e.family("streamq_level_pending", "gauge", "Delivered, unacknowledged entries of a priority level.");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& l : q.levels)
      e.sample("streamq_level_pending", {{"stream", s}, {"level", l.level}}, l.pending);
  });
  e.family("streamq_level_lag", "gauge",
           "Entries of a priority level not yet delivered (approximate; absent when Redis cannot tell).");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& l : q.levels) {
      if (l.lag) e.sample("streamq_level_lag", {{"stream", s}, {"level", l.level}}, *l.lag);
    }
  });
  e.family("streamq_level_oldest_entry_age_seconds", "gauge", "Age of the oldest entry of a priority level.");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& l : q.levels) {
      e.sample_seconds("streamq_level_oldest_entry_age_seconds", {{"stream", s}, {"level", l.level}},
                       l.oldest_entry_age_ms.value_or(0));
    }
  });

  e.family("streamq_group_pending", "gauge", "Delivered, unacknowledged entries of a group.");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& g : q.groups)
      e.sample("streamq_group_pending", {{"stream", s}, {"group", g.name}}, g.pending);
  });
  e.family("streamq_group_lag", "gauge",
           "Entries not yet delivered to a group (approximate; absent when Redis cannot tell).");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& g : q.groups) {
      if (g.lag) e.sample("streamq_group_lag", {{"stream", s}, {"group", g.name}}, *g.lag);
    }
  });
  e.family("streamq_group_consumers", "gauge", "Consumers registered in a group.");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& g : q.groups) {
      e.sample("streamq_group_consumers", {{"stream", s}, {"group", g.name}},
               static_cast<std::int64_t>(g.consumers.size()));
    }
  });
  e.family("streamq_oldest_pending_idle_seconds", "gauge", "Idle time of a group's oldest pending entry.");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& g : q.groups) {
      e.sample_seconds("streamq_oldest_pending_idle_seconds", {{"stream", s}, {"group", g.name}},
                       g.oldest_pending_idle_ms.value_or(0));
    }
  });
  e.family("streamq_consumer_pending", "gauge", "Entries a consumer holds unacknowledged.");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& g : q.groups) {
      for (const auto& c : g.consumers) {
        e.sample("streamq_consumer_pending", {{"stream", s}, {"group", g.name}, {"consumer", c.name}},
                 c.pending);
      }
    }
  });
  e.family("streamq_consumer_idle_seconds", "gauge", "Time since a consumer last read or claimed.");
  each([&](const QueueStats& q, std::string_view s) {
    for (const auto& g : q.groups) {
      for (const auto& c : g.consumers) {
        e.sample_seconds("streamq_consumer_idle_seconds",
                         {{"stream", s}, {"group", g.name}, {"consumer", c.name}}, c.idle_ms);
      }
    }
  });
  return e.str();
}

namespace {

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
    st.total_length = high.length + normal.length + low.length;
    st.total_pending = high.pending + normal.pending + low.pending;
    st.levels = {std::move(high), std::move(normal), std::move(low)};
    if (!st.exists) return st;  // XINFO answered "no such key"; nothing else to read

    const detail::ReplyView info = r[4].view().check();
    st.length = count_of(info.field("length"), "length");
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
      st.pending_total += gi.pending;
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

  QueueStats read(detail::Connection& conn) const {
    QueueStats st = parse_first(conn.pipeline(first_commands()));
    if (st.exists) parse_groups(st, conn.pipeline(group_commands(st)));
    return st;
  }

  static constexpr std::size_t kFirstReplies = 14;

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

QueueStats StatsReader::read() { return impl_->read(); }

}  // namespace streamq
