// SPDX-License-Identifier: MIT
#include "tenant_json.hpp"

namespace streamq::cli {
namespace {

template <class T>
nlohmann::json or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json tenant_json(const TenantInfo& t) {
  const TenantSettings& s = t.settings;
  return {{"tenant", t.tenant},
          {"partition", t.partition},
          {"backlog", t.backlog},
          {"running", t.running},
          {"paused", t.paused},
          {"weight", or_null(s.weight)},
          {"concurrency", or_null(s.concurrency)},
          {"rate_limit", or_null(s.rate_limit)},
          {"rate_per_ms", s.rate_per ? nlohmann::json(s.rate_per->count()) : nlohmann::json(nullptr)},
          {"max_len", or_null(s.max_len)}};
}

}  // namespace streamq::cli
