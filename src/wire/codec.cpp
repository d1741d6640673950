// SPDX-License-Identifier: MIT
#include "codec.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <random>

#include "json_check.hpp"
#include "streamq/errors.hpp"
#include "task_factory.hpp"
#include "util/durations.hpp"

namespace streamq::detail {
namespace {

bool digits(std::string_view s, std::size_t pos, std::size_t n, int& out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  out = v;
  return true;
}

// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm), to avoid timegm.
std::int64_t days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy =
      (153 * static_cast<unsigned>(m + (m > 2 ? -3 : 9)) + 2) / 5 + static_cast<unsigned>(d) - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

struct Rng {
  std::mt19937_64 engine{std::random_device{}()};
};

}  // namespace

std::string format_timestamp(TimePoint t) {
  using namespace std::chrono;
  const auto us = duration_cast<microseconds>(t.time_since_epoch()).count();
  auto secs = static_cast<std::time_t>(us / 1000000);
  auto frac = us % 1000000;
  if (frac < 0) {
    frac += 1000000;
    secs -= 1;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lld", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(frac));
  return buf;
}

std::optional<TimePoint> parse_timestamp(std::string_view s) {
  int y, mo, d, h, mi, se;
  if (!digits(s, 0, 4, y) || s.size() < 19 || s[4] != '-' || !digits(s, 5, 2, mo) || s[7] != '-' ||
      !digits(s, 8, 2, d) || (s[10] != 'T' && s[10] != ' ') || !digits(s, 11, 2, h) || s[13] != ':' ||
      !digits(s, 14, 2, mi) || s[16] != ':' || !digits(s, 17, 2, se)) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return std::nullopt;
  std::size_t pos = 19;
  std::int64_t nanos = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int n = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (n < 9) {
        nanos = nanos * 10 + (s[pos] - '0');
        ++n;
      }
      ++pos;
    }
    if (n == 0) return std::nullopt;
    for (; n < 9; ++n) nanos *= 10;
  }
  std::int64_t offset_min = 0;
  if (pos < s.size()) {
    if (s[pos] == 'Z' || s[pos] == 'z') {
      ++pos;
    } else if (s[pos] == '+' || s[pos] == '-') {
      const int sign = s[pos] == '-' ? -1 : 1;
      int oh, om;
      if (!digits(s, pos + 1, 2, oh)) return std::nullopt;
      std::size_t mpos = pos + 3;
      if (mpos < s.size() && s[mpos] == ':') ++mpos;
      if (!digits(s, mpos, 2, om) || oh > 23 || om > 59) return std::nullopt;
      offset_min = static_cast<std::int64_t>(sign) * (oh * 60 + om);
      pos = mpos + 2;
    }
  }
  if (pos != s.size()) return std::nullopt;
  using namespace std::chrono;
  const std::int64_t secs = days_from_civil(y, mo, d) * 86400 + std::int64_t{h} * 3600 +
                            std::int64_t{mi} * 60 + se - offset_min * 60;
  // The clock holds about 292 years either side of 1970 (nanoseconds in 64 bits with libstdc++):
  // a time outside it is not one this machine can represent (found by tests/fuzz/fuzz_task).
  // (Bounded by nanoseconds too: the sum below is computed in them.)
  constexpr std::int64_t kMostSeconds =
      std::min(duration_cast<seconds>(system_clock::duration::max()).count(),
               duration_cast<seconds>(nanoseconds::max()).count()) -
      1;
  if (secs > kMostSeconds || secs < -kMostSeconds) return std::nullopt;
  return TimePoint(duration_cast<system_clock::duration>(seconds(secs) + nanoseconds(nanos)));
}

std::string new_uuid_v4() {
  thread_local Rng rng;
  const std::uint64_t hi = (rng.engine() & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;
  const std::uint64_t lo = (rng.engine() & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(36, '-');
  std::size_t pos = 0;
  auto put = [&](std::uint64_t v, int nibbles) {
    for (int i = nibbles - 1; i >= 0; --i) {
      if (pos == 8 || pos == 13 || pos == 18 || pos == 23) ++pos;
      out[pos++] = hex[(v >> (i * 4)) & 0xF];
    }
  };
  put(hi, 16);
  put(lo, 16);
  return out;
}

std::optional<std::string> payload_problem(std::string_view json, std::size_t max_bytes, int max_depth) {
  if (json.size() > max_bytes) {
    return "payload is " + std::to_string(json.size()) + " bytes, over the cap of " +
           std::to_string(max_bytes);
  }
  switch (check_json(json, max_depth)) {
    case JsonCheck::ok: return std::nullopt;
    case JsonCheck::too_deep: return "payload is nested deeper than " + std::to_string(max_depth) + " levels";
    case JsonCheck::invalid: break;
  }
  return std::string("payload is not valid JSON");
}

std::optional<int> parse_count(std::string_view text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

std::string retention_field(const Retention& r) {
  check_duration(r.done, std::chrono::milliseconds(0), "retention.done");
  if (r.dead) check_duration(*r.dead, std::chrono::milliseconds(0), "retention.dead");
  return std::to_string(r.done.count()) + " " + std::to_string(r.dead ? r.dead->count() : -1);
}

std::size_t append_new_task(Argv& argv, const NewTask& task) {
  argv.add(field::task_id).add(task.task_id);
  argv.add(field::task_type).add(task.task_type);
  argv.add(field::payload).add(task.payload);
  argv.add(field::created_at).add(task.created_at);
  argv.add(field::max_retries).add(static_cast<std::int64_t>(task.max_retries));
  argv.add(field::retry_count).add("0");
  if (!task.unique_key.empty()) argv.add(field::unique_key).add(task.unique_key);
  if (!task.retention.empty()) argv.add(field::retention).add(task.retention);
  if (!task.deadline.empty()) argv.add(field::deadline).add(task.deadline);
  if (!task.flow_parent.empty()) {
    argv.add(field::flow_parent).add(task.flow_parent);
    argv.add(field::flow_on_failure).add(task.flow_on_failure);
    if (!task.flow_home.empty()) argv.add(field::flow_home).add(task.flow_home);
    if (!task.flow_queue.empty()) argv.add(flow_queue_field).add(task.flow_queue);
  }
  if (!task.batch_id.empty()) argv.add(field::batch_id).add(task.batch_id);
  if (!task.tenant.empty()) argv.add(field::tenant).add(task.tenant);
  if (task.extra_fields != nullptr) {
    for (const auto& [name, value] : *task.extra_fields) argv.add(name).add(value);
  }
  return new_task_string_count(task);
}

std::optional<std::string_view> take_counted(std::string_view text, std::size_t& at) {
  const std::size_t colon = text.find(':', at);
  if (colon == std::string_view::npos) return std::nullopt;
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(text.data() + at, text.data() + colon, n);
  if (ec != std::errc() || end != text.data() + colon || n > text.size() - colon - 1) return std::nullopt;
  at = colon + 1 + n;
  return text.substr(colon + 1, n);
}

void append_counted(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

bool is_reserved_field(std::string_view name) noexcept {
  for (std::string_view r : task_fields) {
    if (name == r) return true;
  }
  for (std::string_view r : dead_letter_fields) {
    if (name == r) return true;
  }
  return name == field::unique_key || name == field::retention || name == field::deadline ||
         name == field::retry_of_span || name == field::flow_parent || name == field::flow_on_failure ||
         name == field::flow_home || name == field::flow_children || name == field::batch_id ||
         name == field::tenant;
}

Decoded decode_task(std::string entry_id, std::shared_ptr<const Fields> shared, std::int64_t deliveries,
                    const DecodeLimits& limits, std::stop_token stop) {
  const Fields& fields = *shared;
  const std::string* values[6] = {};
  static constexpr std::string_view names[6] = {field::task_id,    field::task_type,   field::payload,
                                                field::created_at, field::max_retries, field::retry_count};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    for (std::size_t k = 0; k < 6; ++k) {
      if (fields[i].first != names[k]) continue;
      if (values[k] != nullptr) return "duplicate field " + std::string(names[k]);
      values[k] = &fields[i].second;
    }
  }
  for (std::size_t k = 0; k < 4; ++k) {
    if (values[k] == nullptr) return "missing field " + std::string(names[k]);
  }
  if (values[0]->empty()) return std::string("empty task_id");
  if (values[1]->empty()) return std::string("empty task_type");
  const auto created = parse_timestamp(*values[3]);
  if (!created) return std::string("malformed created_at");
  int max_retries = limits.default_max_retries;
  if (values[4] != nullptr) {
    const auto v = parse_count(*values[4]);
    if (!v) return std::string("malformed max_retries");
    max_retries = *v;
  }
  int retry_count = 0;
  if (values[5] != nullptr) {
    const auto v = parse_count(*values[5]);
    if (!v) return std::string("malformed retry_count");
    retry_count = *v;
  }
  // The same guard the Producer applies; it also keeps a hostile nesting depth away from
  // nlohmann's recursive copy and dump.
  const std::string& raw = *values[2];
  if (auto problem = payload_problem(raw, limits.max_payload_bytes, limits.max_payload_depth)) {
    return std::move(*problem);
  }
  // Parsed on the handler's first Task::json() call.
  return TaskFactory::make(std::move(entry_id), std::move(shared), deliveries, *created, retry_count,
                           max_retries, std::move(stop));
}

}  // namespace streamq::detail
