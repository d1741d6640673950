// SPDX-License-Identifier: MIT
// streamq tenants: a queue's tenants (docs/tenants.md): list the ones that have work, set a
// tenant's own settings or every tenant's defaults, clear a tenant's own, pause and resume one.
#include <array>
#include <charconv>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"
#include "tenant_json.hpp"

namespace streamq::cli {
namespace {

// A setting's cell: "-" when the tenant has none of its own (the queue's default applies), "none"
// for 0 (no limit).
template <class T>
std::string limit_text(const std::optional<T>& v) {
  if (!v) return "-";
  return *v == 0 ? "none" : std::to_string(*v);
}

std::string weight_text(const std::optional<double>& w) {
  if (!w) return "-";
  std::array<char, 32> text{};
  const auto [end, ec] = std::to_chars(text.data(), text.data() + text.size(), *w);
  return std::string(text.data(), end);
}

std::string rate_text(const TenantSettings& s) {
  if (!s.rate_limit || !s.rate_per) return "-";
  return *s.rate_limit == 0 ? "none" : std::to_string(*s.rate_limit) + "/" + ms_text(s.rate_per->count());
}

int list(const Context& g, const std::string& queue, std::size_t count) {
  Inspector in(g.inspector());
  const std::vector<TenantInfo> tenants = in.tenants(queue, count);
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const TenantInfo& t : tenants) arr.push_back(tenant_json(t));
    print_json({{"tenants", arr}});
    return ok;
  }
  Table table(
      {"TENANT", "PARTITION", "BACKLOG", "RUNNING", "PAUSED", "WEIGHT", "CONCURRENCY", "RATE", "MAX_LEN"});
  for (const TenantInfo& t : tenants) {
    const TenantSettings& s = t.settings;
    table.add({cell(t.tenant, 40), cell(t.partition), std::to_string(t.backlog), std::to_string(t.running),
               t.paused ? "yes" : "no", weight_text(s.weight), limit_text(s.concurrency), rate_text(s),
               limit_text(s.max_len)});
  }
  std::cout << table.str();
  return ok;
}

/// The flags of `tenants set` and `tenants defaults`: the settings given; the others stay as they were.
struct SettingsArgs {
  std::string queue, tenant;
  std::optional<double> weight;
  std::optional<int> concurrency;
  std::optional<std::int64_t> rate_limit, rate_per_ms, max_len;

  TenantSettings settings() const {
    TenantSettings s{
        .weight = weight, .concurrency = concurrency, .rate_limit = rate_limit, .max_len = max_len};
    if (rate_per_ms) s.rate_per = std::chrono::milliseconds(*rate_per_ms);
    return s;
  }
  bool any() const { return weight || concurrency || rate_limit || max_len; }
};

void add_settings_flags(CLI::App* sub, SettingsArgs& a) {
  sub->add_option("--weight", a.weight, "its share of the turns (> 0, at most 1,000,000; default 1)");
  sub->add_option("--concurrency", a.concurrency, "at most this many of its tasks run at once (0: no limit)");
  auto* rate = sub->add_option("--rate-limit", a.rate_limit,
                               "at most this many of its tasks start per --rate-per-ms (0: no limit)");
  auto* per = sub->add_option("--rate-per-ms", a.rate_per_ms, "the rate limit's window, in ms");
  rate->needs(per);
  per->needs(rate);
  sub->add_option(
      "--max-len", a.max_len,
      "at most this many of its tasks wait in its backlog; an enqueue beyond is refused (0: no limit)");
}

/// What `tenants set` and `tenants defaults` print: the settings written, as `name=value` pairs.
std::string settings_text(const SettingsArgs& a) {
  std::string out;
  const auto add = [&](const char* name, const std::string& value) {
    out += " " + std::string(name) + "=" + value;
  };
  if (a.weight) add("weight", weight_text(a.weight));
  if (a.concurrency) add("concurrency", std::to_string(*a.concurrency));
  if (a.rate_limit) add("rate", std::to_string(*a.rate_limit) + "/" + std::to_string(*a.rate_per_ms) + "ms");
  if (a.max_len) add("max_len", std::to_string(*a.max_len));
  return out;
}

int set_settings(const Context& g, const SettingsArgs& a, bool defaults) {
  if (!a.any()) {
    std::cerr << "streamq tenants: nothing to set: give --weight, --concurrency, --rate-limit with "
                 "--rate-per-ms, or --max-len\n";
    return usage;
  }
  Inspector in(g.inspector());
  if (defaults) {
    in.set_tenant_defaults(a.queue, a.settings());
    std::cout << "defaults of every tenant of " << a.queue << ":" << settings_text(a) << "\n";
  } else {
    in.set_tenant(a.queue, a.tenant, a.settings());
    std::cout << "tenant " << a.tenant << " of " << a.queue << ":" << settings_text(a) << "\n";
  }
  return ok;
}

struct TenantArgs {
  std::string queue, tenant;
};

/// `tenants <name> QUEUE TENANT`, running `act` and printing "tenant T of Q <done>".
void add_tenant_action(CLI::App& tenants, Context& ctx, const char* name, const char* description,
                       const char* done, void (Inspector::*act)(const std::string&, const std::string&)) {
  auto a = std::make_shared<TenantArgs>();
  auto* sub = add_queue_command(tenants, name, description, a->queue);
  sub->add_option("tenant", a->tenant, "the tenant")->required();
  on_run(sub, ctx, [&ctx, a, done, act] {
    Inspector in(ctx.inspector());
    (in.*act)(a->queue, a->tenant);
    std::cout << "tenant " << a->tenant << " of " << a->queue << " " << done << "\n";
    return int{ok};
  });
}

}  // namespace

void add_tenants(CLI::App& app, Context& ctx) {
  auto* tenants = app.add_subcommand(
      "tenants", "a queue's tenants (fair queues): list, set, defaults, clear, pause, resume");
  tenants->require_subcommand(1);

  auto queue = std::make_shared<std::string>();
  auto count = std::make_shared<std::size_t>(100);
  auto* list_sub = add_queue_command(*tenants, "list",
                                     "the tenants that have work, the largest backlog first, with their "
                                     "running tasks and their own settings (-: the queue's default)",
                                     *queue);
  list_sub
      ->add_option("--count", *count,
                   "tenants looked at per partition (1 to 10,000) of the ready ones (the next to be "
                   "served) and of the waiting ones")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  on_run(list_sub, ctx, [&ctx, queue, count] { return list(ctx, *queue, *count); });

  auto set = std::make_shared<SettingsArgs>();
  auto* set_sub =
      add_queue_command(*tenants, "set", "set a tenant's own settings (the flags given)", set->queue);
  set_sub->add_option("tenant", set->tenant, "the tenant")->required();
  add_settings_flags(set_sub, *set);
  on_run(set_sub, ctx, [&ctx, set] { return set_settings(ctx, *set, false); });

  auto defaults = std::make_shared<SettingsArgs>();
  auto* defaults_sub =
      add_queue_command(*tenants, "defaults",
                        "set the defaults of every tenant of the queue (the flags given)", defaults->queue);
  add_settings_flags(defaults_sub, *defaults);
  on_run(defaults_sub, ctx, [&ctx, defaults] { return set_settings(ctx, *defaults, true); });

  add_tenant_action(*tenants, ctx, "clear",
                    "forget a tenant's own settings (the defaults apply; a pause stays)", "cleared",
                    &Inspector::clear_tenant);
  add_tenant_action(*tenants, ctx, "pause", "none of the tenant's tasks starts (running ones finish)",
                    "paused", &Inspector::pause_tenant);
  add_tenant_action(*tenants, ctx, "resume", "the tenant's tasks start again", "resumed",
                    &Inspector::resume_tenant);
}

}  // namespace streamq::cli
