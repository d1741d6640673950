// SPDX-License-Identifier: MIT
// The Inspector's calls on a queue's tenants (docs/tenants.md): their settings, pause and
// resume, and the listing of the tenants that have work. The settings are written in every
// partition of the queue (a tenant lives in one, by its name's hash); the turns are the
// workers' (src/lua/tenants_dispatch.lua), which read the settings at each turn.
#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <set>

#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "streamq/errors.hpp"
#include "wire/keys.hpp"

namespace streamq {

using detail::Argv;
using detail::check_queue;
using detail::Reply;
using detail::ReplyView;

namespace {

/// The settings' fields as lib/tenants.lua reads them. ConfigError for a value out of range.
std::vector<std::pair<std::string, std::string>> settings_fields(const TenantSettings& s) {
  std::vector<std::pair<std::string, std::string>> out;
  if (s.weight) {
    if (!(*s.weight > 0 && *s.weight <= 1e6))
      throw ConfigError("a tenant's weight must be > 0 and <= 1,000,000");
    std::array<char, 32> text{};
    const auto [end, ec] = std::to_chars(text.data(), text.data() + text.size(), *s.weight);
    out.emplace_back("weight", std::string(text.data(), end));
  }
  if (s.concurrency) {
    if (*s.concurrency < 0) throw ConfigError("a tenant's concurrency must be >= 0 (0: no limit)");
    out.emplace_back("concurrency", std::to_string(*s.concurrency));
  }
  if (s.rate_limit.has_value() != s.rate_per.has_value()) {
    throw ConfigError("a tenant's rate needs both rate_limit and rate_per");
  }
  if (s.rate_limit) {
    if (*s.rate_limit < 0) throw ConfigError("a tenant's rate_limit must be >= 0 (0: no limit)");
    if (s.rate_per->count() < 1 || *s.rate_per > std::chrono::hours(24 * 365)) {
      throw ConfigError("a tenant's rate_per must be 1 ms to a year");
    }
    out.emplace_back("rate", std::to_string(*s.rate_limit));
    out.emplace_back("per", std::to_string(s.rate_per->count()));
  }
  if (s.max_len) {
    if (*s.max_len < 0) throw ConfigError("a tenant's max_len must be >= 0 (0: no limit)");
    out.emplace_back("max_len", std::to_string(*s.max_len));
  }
  return out;
}

std::optional<std::int64_t> integer_of(const ReplyView v) {
  if (!v.is_string()) return std::nullopt;
  std::int64_t n = 0;
  const std::string_view s = v.str();
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

/// A tenant's own settings from its hash's HGETALL.
TenantSettings settings_of(const ReplyView all, bool& paused) {
  TenantSettings s;
  paused = false;
  for (std::size_t i = 0; i + 1 < all.size(); i += 2) {
    const std::string_view name = all[i].str();
    const ReplyView value = all[i + 1];
    if (name == "weight") {
      double w = 0;
      const std::string_view text = value.str();
      if (std::from_chars(text.data(), text.data() + text.size(), w).ec == std::errc()) s.weight = w;
    } else if (name == "concurrency") {
      if (const auto n = integer_of(value)) s.concurrency = static_cast<int>(*n);
    } else if (name == "rate") {
      s.rate_limit = integer_of(value);
    } else if (name == "per") {
      if (const auto n = integer_of(value)) s.rate_per = std::chrono::milliseconds(*n);
    } else if (name == "max_len") {
      s.max_len = integer_of(value);
    } else if (name == "paused") {
      paused = value.str() == "1";
    }
  }
  return s;
}

}  // namespace

namespace {

/// Runs, pipelined, the commands that `each(part, argvs)` appends for every part of a queue;
/// throws the first error reply.
template <class Each>
void on_every_part(detail::Connection& conn, const std::vector<std::string>& parts, Each each) {
  std::vector<Argv> argvs;
  for (const std::string& part : parts) each(part, argvs);
  for (const Reply& r : conn.pipeline(argvs)) r.view().check();
}

/// HSET of `fields` to the hash that `key(part)` names in every part.
template <class Key>
void set_everywhere(detail::Connection& conn, const std::vector<std::string>& parts, Key key,
                    const std::vector<std::pair<std::string, std::string>>& fields) {
  if (fields.empty()) return;
  on_every_part(conn, parts, [&](const std::string& part, std::vector<Argv>& argvs) {
    Argv& a = argvs.emplace_back(Argv{"HSET"});
    a.add_copy(key(part));
    for (const auto& [name, value] : fields) a.add(name).add(value);
  });
}

}  // namespace

void Inspector::set_tenant(const std::string& queue, const std::string& tenant,
                           const TenantSettings& settings) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  detail::check_tenant_name(tenant);
  const auto fields = settings_fields(settings);
  set_everywhere(
      impl_->connected(), impl_->parts(queue),
      [&](const std::string& part) { return detail::tenant_config_key(part, tenant); }, fields);
}

void Inspector::set_tenant_defaults(const std::string& queue, const TenantSettings& settings) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  const auto fields = settings_fields(settings);
  set_everywhere(
      impl_->connected(), impl_->parts(queue),
      [](const std::string& part) { return detail::tenant_defaults_key(part); }, fields);
}

void Inspector::clear_tenant(const std::string& queue, const std::string& tenant) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  detail::check_tenant_name(tenant);
  on_every_part(impl_->connected(), impl_->parts(queue),
                [&](const std::string& part, std::vector<Argv>& argvs) {
                  Argv& a = argvs.emplace_back(Argv{"HDEL"});
                  a.add_copy(detail::tenant_config_key(part, tenant));
                  for (const char* name : {"weight", "concurrency", "rate", "per", "max_len"}) a.add(name);
                });
}

void Inspector::pause_tenant(const std::string& queue, const std::string& tenant) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  detail::check_tenant_name(tenant);
  set_everywhere(impl_->connected(), impl_->parts(queue),
                 [&](const std::string& part) { return detail::tenant_config_key(part, tenant); },
                 {{"paused", "1"}});
}

void Inspector::resume_tenant(const std::string& queue, const std::string& tenant) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  detail::check_tenant_name(tenant);
  // Then due at once: a paused tenant waits at +inf (tenants_dispatch.lua), until this.
  on_every_part(
      impl_->connected(), impl_->parts(queue), [&](const std::string& part, std::vector<Argv>& argvs) {
        argvs.emplace_back(Argv{"HDEL"}).add_copy(detail::tenant_config_key(part, tenant)).add("paused");
        argvs.emplace_back(Argv{"ZADD"})
            .add_copy(detail::tenants_waiting_key(part))
            .add("XX")
            .add("0")
            .add(tenant);
      });
}

std::vector<TenantInfo> Inspector::tenants(const std::string& queue, std::size_t count) {
  const std::lock_guard lock(impl_->calls);
  check_queue(queue);
  if (count < 1 || count > 10000) throw ConfigError("count must be 1 to 10,000");
  std::vector<TenantInfo> out;
  for (const std::string& part : impl_->parts(queue)) {
    const auto n = std::to_string(count - 1);
    std::vector<Argv> ranges;
    ranges.emplace_back(Argv{"ZRANGE"}).add_copy(detail::tenants_ready_key(part)).add("0").add(n);
    ranges.emplace_back(Argv{"ZRANGE"}).add_copy(detail::tenants_waiting_key(part)).add("0").add(n);
    const auto lists = impl_->connected().pipeline(ranges);
    std::set<std::string> names;
    for (const Reply& r : lists) {
      const ReplyView v = r.view().check();
      for (std::size_t i = 0; i < v.size(); ++i) names.emplace(v[i].str());
    }
    std::vector<Argv> argvs;
    for (const std::string& t : names) {
      for (const Priority level : {Priority::high, Priority::normal, Priority::low}) {
        argvs.emplace_back(Argv{"LLEN"}).add_copy(detail::tenant_backlog_key(part, t, level));
      }
      argvs.emplace_back(Argv{"HLEN"}).add_copy(part + ":tenants:slots:" + t);
      argvs.emplace_back(Argv{"HGETALL"}).add_copy(detail::tenant_config_key(part, t));
    }
    const auto replies = impl_->connected().pipeline(argvs);
    std::size_t at = 0;
    for (const std::string& t : names) {
      TenantInfo info{.tenant = t, .partition = part};
      for (int level = 0; level < 3; ++level) info.backlog += replies[at++].view().check().integer();
      info.running = replies[at++].view().check().integer();
      info.settings = settings_of(replies[at++].view().check(), info.paused);
      out.push_back(std::move(info));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TenantInfo& a, const TenantInfo& b) { return a.backlog > b.backlog; });
  return out;
}

}  // namespace streamq
