// SPDX-License-Identifier: MIT
// QueueStats::to_json(): a snapshot as a JSON document.
#include "streamq/stats.hpp"

#include <nlohmann/json.hpp>

namespace streamq {

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
      {"backlog", backlog ? json(*backlog) : json(nullptr)},
      {"backlog_tenants", backlog_tenants ? json(*backlog_tenants) : json(nullptr)},
      {"next_delayed_due_ms", next_delayed_due_ms ? json(*next_delayed_due_ms) : json(nullptr)},
      {"next_delayed_due_in_ms", next_delayed_due_in_ms ? json(*next_delayed_due_in_ms) : json(nullptr)},
      {"oldest_message", oldest_entry_id.empty() ? json(nullptr) : json(oldest_entry_id)},
      {"oldest_entry_age_ms", oldest_entry_age_ms ? json(*oldest_entry_age_ms) : json(nullptr)},
      {"groups", groups_json},
      {"levels", levels_json},
      {"total_length", length},          // deprecated, removed in 0.3
      {"total_pending", pending_total},  // deprecated, removed in 0.3
  };
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace streamq
