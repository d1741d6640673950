// SPDX-License-Identifier: MIT
#include "scheduler/zoned_cron.hpp"

#include <algorithm>

namespace streamq::detail {
namespace {

using namespace std::chrono;
using TimePoint = system_clock::time_point;

/// How far next/latest look, as cron.cpp's fixed-offset search.
constexpr auto kSearch = years(28);

/// An expression with `*` in its minute or hour field names a frequency, not a time of day
/// (Vixie cron's "wildcard jobs"): it follows elapsed time across an offset change.
bool follows_elapsed_time(const CronSpec& spec) { return spec.minute_star || spec.hour_star; }

/// The expression read at one fixed offset.
CronSpec at_offset(CronSpec spec, minutes offset) {
  spec.utc_offset = offset;
  return spec;
}

/// When `span` follows a fall back from `before`, its first (before.offset - span.offset) repeat
/// local times `before` has shown already: the first instant after them; else span.begin.
TimePoint first_unrepeated(const ZoneSpan& before, const ZoneSpan& span) {
  return span.offset < before.offset ? span.begin + (before.offset - span.offset) : span.begin;
}

/// True when `span` follows a spring forward from `before` and a local time the clock skipped,
/// [span.begin + before.offset, span.begin + span.offset), matches the expression. Read at
/// before's offset, those local times are the instants [span.begin, span.begin + the skip).
bool skipped_time_matches(const CronSpec& spec, const ZoneSpan& before, const ZoneSpan& span) {
  if (span.offset <= before.offset) return false;
  const TimePoint first = cron_next_after(at_offset(spec, before.offset), span.begin - seconds(1));
  return first < span.begin + (span.offset - before.offset);
}

TimePoint plus_search(TimePoint t) { return t < TimePoint::max() - kSearch ? t + kSearch : TimePoint::max(); }
TimePoint minus_search(TimePoint t) {
  return t > TimePoint::min() + kSearch ? t - kSearch : TimePoint::min();
}

}  // namespace

// Span by span from t's, forwards: the first span with a tick after `after` holds the answer.
// In cron_next_after, `x - 1s` for a whole minute x asks for ticks at x or later.
TimePoint zoned_cron_next_after(const ZonedCron& cron, TimePoint t) {
  const bool wall_clock = !follows_elapsed_time(cron.spec);
  const TimePoint horizon = plus_search(t);
  ZoneSpan span = cron.zone.span_at(t);
  TimePoint after = t;
  for (;;) {
    TimePoint from = after;
    if (wall_clock && span.begin != TimePoint::min()) {
      const ZoneSpan before = cron.zone.span_before(span);
      // A skipped time runs at the first instant after the skip: this span's first.
      if (span.begin > after && skipped_time_matches(cron.spec, before, span)) return span.begin;
      // A repeated time ran at its first occurrence, in `before`.
      from = std::max(from, first_unrepeated(before, span) - seconds(1));
    }
    const TimePoint tick = cron_next_after(at_offset(cron.spec, span.offset), from);
    if (tick < span.end) return tick;
    if (span.end == TimePoint::max() || span.end > horizon) return TimePoint::max();
    after = span.end - seconds(1);
    span = cron.zone.span_at(span.end);
  }
}

// Span by span from t's, backwards.
TimePoint zoned_cron_latest_at_or_before(const ZonedCron& cron, TimePoint t) {
  const bool wall_clock = !follows_elapsed_time(cron.spec);
  const TimePoint horizon = minus_search(t);
  ZoneSpan span = cron.zone.span_at(t);
  TimePoint at = t;
  for (;;) {
    const TimePoint tick = cron_latest_at_or_before(at_offset(cron.spec, span.offset), at);
    if (span.begin == TimePoint::min()) return tick;  // min() when there is none
    const ZoneSpan before = cron.zone.span_before(span);
    if (tick >= (wall_clock ? first_unrepeated(before, span) : span.begin)) return tick;
    if (wall_clock && skipped_time_matches(cron.spec, before, span)) return span.begin;
    if (span.begin < horizon) return TimePoint::min();
    at = span.begin - seconds(1);
    span = before;
  }
}

}  // namespace streamq::detail
