// SPDX-License-Identifier: MIT
// Snapshots in the Prometheus text format: QueueStats::to_prometheus() and to_prometheus().
#include "streamq/stats.hpp"

#include <algorithm>
#include <sstream>

namespace streamq {
namespace {

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

std::string QueueStats::to_prometheus() const {
  return streamq::to_prometheus(std::vector<QueueStats>{*this});
}

std::string to_prometheus(const std::vector<QueueStats>& queues) {
  Exposition e;
  // Each family once (a second # HELP/# TYPE of a name is a parse error), with every queue's samples.
  const auto each = [&](auto&& write) {
    for (const QueueStats& q : queues) write(q, std::string_view(q.stream));
  };
  e.family("streamq_stream_length", "gauge",
           "Entries in the queue, every priority level (unfinished tasks).");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_stream_length", {{"stream", s}}, q.length);
  });
  e.family("streamq_entries_added_total", "counter", "Entries ever added to the stream.");
  each([&](const QueueStats& q, std::string_view s) {
    e.sample("streamq_entries_added_total", {{"stream", s}}, q.entries_added);
  });
  e.family("streamq_pending", "gauge",
           "Delivered, unacknowledged entries of the queue, every priority level, over all groups.");
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

}  // namespace streamq
