// SPDX-License-Identifier: MIT
// The stats of a partitioned queue: its partitions' stats summed, level by level and group by
// group (detail::sum_partitions).
#include "stats_read.hpp"

#include <algorithm>
#include <optional>

#include "streamq/stats.hpp"
#include "wire/keys.hpp"

namespace streamq {
namespace {

template <class T>
void keep_max(std::optional<T>& into, const std::optional<T>& v) {
  if (v && (!into || *v > *into)) into = v;
}

template <class T>
void keep_min(std::optional<T>& into, const std::optional<T>& v) {
  if (v && (!into || *v < *into)) into = v;
}

/// A sum of lags (or of other counts that may be unknown): unknown as soon as one of them is.
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
  bool first = true;
  for (QueueStats& p : parts) {
    // The backlog counts: unknown as soon as one partition's is.
    if (first) {
      total.backlog = p.backlog;
      total.backlog_tenants = p.backlog_tenants;
    } else {
      add_lag(total.backlog, p.backlog);
      add_lag(total.backlog_tenants, p.backlog_tenants);
    }
    first = false;
    total.exists = total.exists || p.exists;
    total.length += p.length;
    total.entries_added += p.entries_added;
    total.pending_total += p.pending_total;
    total.dlq_length += p.dlq_length;
    total.dlq_entries_added += p.dlq_entries_added;
    total.delayed += p.delayed;
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
  fill_deprecated_totals(total);
  return total;
}

void fill_deprecated_totals(QueueStats& stats) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  stats.total_length = stats.length;
  stats.total_pending = stats.pending_total;
#pragma GCC diagnostic pop
}

}  // namespace detail
}  // namespace streamq
