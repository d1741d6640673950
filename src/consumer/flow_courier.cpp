// SPDX-License-Identifier: MIT
#include "flow_courier.hpp"

#include <charconv>
#include <string_view>
#include <vector>

#include "log.hpp"
#include "streamq/errors.hpp"
#include "util/concat.hpp"
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
/// `<length>:<bytes>`) as a call to `to`'s partition, or false when it is not one: five keys,
/// those of `to` and a guard of its, the mode 'placed'.
bool unpack_placement(std::string_view to, std::string_view packed, Argv& argv, const ScriptRunner& scripts) {
  std::vector<std::string_view> parts;
  std::size_t at = 0;
  while (at < packed.size()) {
    const auto part = take_counted(packed, at);
    if (!part) return false;
    parts.push_back(*part);
  }
  const QueueKeys k = queue_keys(to);
  if (parts.size() < 7 || parts[0] != "5" || parts[1] != k.stream || parts[2] != k.high ||
      parts[3] != k.low || parts[4] != k.delayed || !parts[5].starts_with(placed_key(to, "")) ||
      parts[6] != "placed") {
    return false;
  }
  argv = scripts.begin(ScriptId::enqueue, 5);
  for (std::size_t i = 1; i < parts.size(); ++i) argv.add(parts[i]);
  return true;
}

/// One pass's calls, each with how its entry is deleted once it answered.
struct Calls {
  std::vector<Argv> argvs;
  std::vector<ScriptId> ids;
  std::vector<std::string_view> entries;  // the outbox entry, or the placement's token
  std::vector<bool> placement;
};

}  // namespace

FlowCourier::Pass FlowCourier::pass(ScriptRunner& scripts) {
  const QueueKeys& keys = s_.keys();
  Connection& conn = scripts.connection();
  Pass out;
  const std::string most = std::to_string(kMostPerPass);
  // The ends, in order, and whether there are placements.
  std::vector<Argv> reads;
  reads.push_back(Argv{"XRANGE", keys.outbox, after_, "+", "COUNT", most});
  reads.push_back(Argv{"HLEN", keys.placing});
  const std::vector<Reply> read = conn.pipeline(reads);
  const ReplyView entries = read[0].view().check();
  const bool placing = read[1].view().check().integer() > 0;
  Calls calls;
  Argv foreign{"XDEL", keys.outbox};  // entries that are not streamq's
  const std::string own_name = keys.stream == s_.queue ? s_.queue : partition_base(s_.queue);
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const std::string_view id = entries[e][0].str();
    const ReplyView fields = entries[e][1];
    const std::string_view to = field_of(fields, "to");
    const std::string_view state = field_of(fields, "state");
    // (`to` may be any queue's partition: a child of a flow across queues.)
    if (field_of(fields, "kind") != "settle" || to.empty() || field_of(fields, "parent").empty() ||
        field_of(fields, "child").empty() || (state != "done" && state != "dead" && state != "cancelled")) {
      log(LogLevel::error, "flow outbox " + keys.outbox + ": entry " + std::string(id) +
                               " is not the end of a flow's child; deleted");
      foreign.add(id);
      continue;
    }
    Argv& argv = calls.argvs.emplace_back(scripts.begin(ScriptId::flow_apply, 1));
    argv.add(to);
    for (const std::string_view name : {"parent", "child", "state", "policy", "result", "error"}) {
      argv.add(field_of(fields, name));
    }
    // A parent in another queue checks that it sent its child to this one (flow_apply.lua), by
    // the queue's name in one form (detail::queue_name, as the producer keeps it).
    const bool home_here = to == s_.queue || is_partition_of(s_.queue, to);
    argv.add(home_here ? std::string_view() : std::string_view(own_name));
    calls.ids.push_back(ScriptId::flow_apply);
    calls.entries.push_back(id);
    calls.placement.push_back(false);
  }
  // The placements their producer did not take out of the hash in time.
  std::vector<Reply> time_and_page;  // (the calls view its strings)
  Argv unreadable{"HDEL", keys.placing};
  if (placing) {
    // The server's clock (to age them) and a page of them.
    std::vector<Argv> scan;
    scan.push_back(Argv{"TIME"});
    scan.push_back(Argv{"HSCAN", keys.placing, placing_cursor_, "COUNT", most});
    time_and_page = conn.pipeline(scan);
    std::int64_t seconds = 0, micros = 0;
    const ReplyView time = time_and_page[0].view().check();
    std::from_chars(time[0].str().data(), time[0].str().data() + time[0].str().size(), seconds);
    std::from_chars(time[1].str().data(), time[1].str().data() + time[1].str().size(), micros);
    const std::int64_t now_ms = seconds * 1000 + micros / 1000;
    const ReplyView v = time_and_page[1].view().check();
    placing_cursor_ = std::string(v[0].str());
    const ReplyView pairs = v[1];
    for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
      const std::string_view token = pairs[i].str();
      const std::string_view packed = pairs[i + 1].str();
      std::size_t at = 0;
      const auto since = take_counted(packed, at);
      const auto to = take_counted(packed, at);
      const auto call = take_counted(packed, at);
      std::int64_t since_ms = 0;
      Argv argv;
      const bool ok =
          since && to && call &&
          std::from_chars(since->data(), since->data() + since->size(), since_ms).ec == std::errc() &&
          unpack_placement(*to, *call, argv, scripts);
      if (!ok) {
        log(LogLevel::error, "flow placements " + keys.placing + ": " + std::string(token) +
                                 " is not a placement of a flow's tasks; deleted");
        unreadable.add(token);
        continue;
      }
      if (now_ms - since_ms < kPlacementGraceMs) continue;  // its producer is on it
      calls.argvs.push_back(std::move(argv));
      calls.ids.push_back(ScriptId::enqueue);
      calls.entries.push_back(token);
      calls.placement.push_back(true);
    }
  }
  Argv carried{"XDEL", keys.outbox};
  Argv placed{"HDEL", keys.placing};
  if (!calls.argvs.empty()) {
    try {
      const std::vector<Reply> replies = scripts.call_pipelined(calls.ids, calls.argvs);
      for (std::size_t i = 0; i < replies.size(); ++i) {
        if (!replies[i].view().is_error()) {
          if (!calls.placement[i] && replies[i].view().is_integer() && replies[i].view().integer() == 0) {
            log(LogLevel::error, "flow outbox " + keys.outbox + ": entry " + std::string(calls.entries[i]) +
                                     " ends a child its parent did not send to this queue; deleted");
          }
          (calls.placement[i] ? placed : carried).add(calls.entries[i]);
        } else if (out.failed.empty()) {
          out.failed = std::string(replies[i].view().error()) + " (" +
                       (calls.placement[i] ? keys.placing : keys.outbox) + " " +
                       std::string(calls.entries[i]) + ", kept for a later pass)";
        }
      }
    } catch (const ConnectionError& e) {
      // A partition they go to is out of reach (its master down, before a failover): none of
      // this pass's calls is known to have run; all stay, and the next pass reads on past them.
      out.failed = std::string(e.what()) + " (" + std::to_string(calls.argvs.size()) + " flow calls of " +
                   keys.outbox + " kept for a later pass)";
    }
  }
  out.carried = static_cast<std::int64_t>(carried.size() + placed.size() - 4);
  std::vector<Argv> deletes;
  for (Argv* a : {&foreign, &carried, &placed, &unreadable}) {
    if (a->size() > 2) deletes.push_back(std::move(*a));
  }
  if (!deletes.empty()) {
    for (const Reply& r : conn.pipeline(deletes)) r.view().check();
  }
  // While reads come back full, the next reads on after this one (past entries that failed,
  // so ends for partitions that answer are not held up behind them); a short one ends the
  // round, and the next starts from the oldest entry again.
  out.read = static_cast<std::int64_t>(entries.size());
  after_ = out.read >= kMostPerPass ? concat("(", entries[entries.size() - 1][0].str()) : "-";
  return out;
}

}  // namespace streamq::detail
