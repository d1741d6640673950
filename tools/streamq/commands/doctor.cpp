// SPDX-License-Identifier: MIT
// streamq doctor: whether the server runs streamq without losing tasks (Inspector::doctor).
#include <iostream>
#include <memory>
#include <string>

#include <streamq/streamq.hpp>

#include "commands/commands.hpp"
#include "output.hpp"

namespace streamq::cli {
namespace {

int doctor(const Context& g, const std::string& queue, const std::string& user) {
  Inspector in(g.inspector());
  const auto findings = in.doctor(queue, user);
  Finding::Severity worst = Finding::Severity::ok;
  for (const Finding& f : findings) worst = std::max(worst, f.severity);
  if (g.json()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const Finding& f : findings) {
      arr.push_back({{"severity", to_string(f.severity)}, {"topic", f.topic}, {"message", f.message}});
    }
    std::cout << arr.dump(2) << "\n";
  } else {
    for (const Finding& f : findings) {
      std::cout << "[" << to_string(f.severity) << "] " << f.topic << ": " << f.message << "\n";
    }
    std::cout << (worst == Finding::Severity::danger
                      ? "streamq doctor: this server can lose tasks; fix the [danger] lines\n"
                      : "streamq doctor: nothing here loses tasks\n");
  }
  return worst == Finding::Severity::danger ? unsafe : ok;
}

struct DoctorArgs {
  std::string queue = "task_queue";
  std::string user;
};

}  // namespace

void add_doctor(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<DoctorArgs>();
  auto* sub = app.add_subcommand("doctor", "check that the server runs streamq without losing tasks");
  sub->add_option("--queue", a->queue, "the queue whose ACL permissions to check")->capture_default_str();
  sub->add_option("--user", a->user,
                  "the ACL user whose permissions to check for each role (default: the connection's own)");
  on_run(sub, ctx, [&ctx, a] { return doctor(ctx, a->queue, a->user); });
}

}  // namespace streamq::cli
