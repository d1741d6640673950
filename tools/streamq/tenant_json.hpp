// SPDX-License-Identifier: MIT
// A tenant as the streamq command's --format json and the dashboard's /api/tenants show it.
#pragma once

#include <nlohmann/json.hpp>
#include <streamq/inspector.hpp>

namespace streamq::cli {

/// {tenant, partition, backlog, running, paused, weight, concurrency, rate_limit, rate_per_ms,
/// max_len}: the settings are the tenant's own (null: not set for it, the queue's default applies).
nlohmann::json tenant_json(const TenantInfo& t);

}  // namespace streamq::cli
