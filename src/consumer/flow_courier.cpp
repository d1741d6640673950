// SPDX-License-Identifier: MIT
#include "flow_courier.hpp"

#include <string_view>
#include <vector>

#include "log.hpp"
#include "streamq/errors.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

namespace {

/// The value of field `name` of an outbox entry's fields (name, value, ...), "" when absent.
std::string_view field_of(const ReplyView& fields, std::string_view name) {
  for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
    if (fields[i].is_string() && fields[i].str() == name && fields[i + 1].is_string())
      return fields[i + 1].str();
  }
  return {};
}

/// The placement `packed` (the enqueue call's numkeys, keys and arguments, each
/// `<length>:<bytes>`) as a call to `to`'s partition, or false when it is not one: four keys,
/// those of `to`, the mode 'placed'.
bool unpack_placement(std::string_view to, std::string_view packed, Argv& argv, const ScriptRunner& scripts) {
  std::vector<std::string_view> parts;
  std::size_t at = 0;
  while (at < packed.size()) {
    const auto part = take_counted(packed, at);
    if (!part) return false;
    parts.push_back(*part);
  }
  const QueueKeys k = queue_keys(to);
  if (parts.size() < 6 || parts[0] != "4" || parts[1] != k.stream || parts[2] != k.high ||
      parts[3] != k.low || parts[4] != k.delayed || parts[5] != "placed") {
    return false;
  }
  argv = scripts.begin(ScriptId::enqueue, 4);
  for (std::size_t i = 1; i < parts.size(); ++i) argv.add(parts[i]);
  return true;
}

}  // namespace

std::int64_t FlowCourier::pass(ScriptRunner& scripts) {
  const std::string& outbox = s_.keys().outbox;
  const std::string most = std::to_string(kMostPerPass);
  const Reply read = scripts.connection().command(Argv{"XRANGE", outbox, "-", "+", "COUNT", most});
  const ReplyView entries = read.view().check();
  if (entries.size() == 0) return 0;
  std::vector<Argv> calls;
  std::vector<ScriptId> ids;
  std::vector<std::string_view> of;  // each call's entry
  Argv carried{"XDEL", outbox};
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const std::string_view id = entries[e][0].str();
    const ReplyView fields = entries[e][1];
    const std::string_view kind = field_of(fields, "kind");
    const std::string_view to = field_of(fields, "to");
    Argv argv;
    const std::string_view state = field_of(fields, "state");
    bool ok = is_partition_of(s_.queue, to);
    if (ok && kind == "settle" && (state == "done" || state == "dead" || state == "cancelled")) {
      argv = scripts.begin(ScriptId::flow_apply, 1);
      argv.add(to);
      for (const std::string_view name : {"parent", "child", "state", "policy", "result", "error"}) {
        argv.add(field_of(fields, name));
      }
    } else {
      ok = ok && kind == "place" && unpack_placement(to, field_of(fields, "call"), argv, scripts);
    }
    if (!ok) {
      // Not written by streamq (or by a version that wrote another shape): it cannot be
      // carried; kept in the log, not in the way of the rest.
      log(LogLevel::error, "flow outbox " + outbox + ": entry " + std::string(id) +
                               " is not a flow's settle or place entry of this queue; deleted");
      carried.add(id);
      continue;
    }
    calls.push_back(std::move(argv));
    ids.push_back(kind == "settle" ? ScriptId::flow_apply : ScriptId::enqueue);
    of.push_back(id);
  }
  std::string failed;  // the first call's error, with its entry
  if (!calls.empty()) {
    const std::vector<Reply> replies = scripts.call_pipelined(ids, calls);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (!replies[i].view().is_error()) {
        carried.add(of[i]);
      } else if (failed.empty()) {
        failed = std::string(replies[i].view().error()) + " (flow outbox " + outbox + ", entry " +
                 std::string(of[i]) + ", kept for a later pass)";
      }
    }
  }
  if (carried.size() > 2) scripts.connection().command(carried).view().check();
  // The runner logs it and tries again after its backoff: the entries stay until carried.
  if (!failed.empty()) throw ReplyError(failed);
  return static_cast<std::int64_t>(entries.size());
}

}  // namespace streamq::detail
