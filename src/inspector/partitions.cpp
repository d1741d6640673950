// SPDX-License-Identifier: MIT
// The Inspector and partitioned queues: the streams a queue name stands for, the partition an
// id names or holds an entry, and each partitioned queue as one QueueInfo (for queues()).
#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "inspector_impl.hpp"
#include "inspector_util.hpp"
#include "streamq/errors.hpp"
#include "wire/keys.hpp"

namespace streamq {

using detail::Argv;
using detail::kPriorities;
using detail::level_stream;
using detail::ReplyView;

namespace {

/// The partition index of `name` when it is a partition's stream `{<base>:<i>}` (i < 1024,
/// written without leading zeros), with its base; nullopt otherwise.
std::optional<std::pair<std::string, int>> partition_of(std::string_view name) {
  if (name.size() < 5 || name.front() != '{' || name.back() != '}') return std::nullopt;
  const std::string_view inner = name.substr(1, name.size() - 2);
  if (inner.find_first_of("{}") != std::string_view::npos) return std::nullopt;
  const auto colon = inner.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  const std::string_view digits = inner.substr(colon + 1);
  if (digits.empty() || digits.size() > 4 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  int i = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    i = i * 10 + (c - '0');
  }
  if (i >= detail::kMaxPartitions) return std::nullopt;
  return std::pair{std::string(inner.substr(0, colon)), i};
}

/// Adds `part`'s numbers to the partitioned queue `into`.
void add_part(QueueInfo& into, const QueueInfo& part) {
  for (Priority p : part.levels) {
    if (std::find(into.levels.begin(), into.levels.end(), p) == into.levels.end()) into.levels.push_back(p);
  }
  into.length += part.length;
  into.dlq_length += part.dlq_length;
  into.delayed_count += part.delayed_count;
  into.paused = into.paused && part.paused;
}

}  // namespace

std::vector<std::string> Inspector::Impl::parts(const std::string& queue) {
  const std::string base = detail::partition_base(queue);
  if (base.empty()) return {queue};
  // A key this ACL user may not read is one it cannot act on either: as good as absent.
  const auto exists = [](const detail::Reply& r) {
    const ReplyView v = r.view();
    if (v.is_error() && v.error().starts_with("NOPERM")) return false;
    return v.check().integer() > 0;
  };
  // First partition 0 (every partitioned queue has it once a worker ran: workers create every
  // partition's stream) with the queue's own keys, one by one (without a hash tag they may be
  // in different slots). Only when partition 0 exists, every other possible partition, each
  // in one EXISTS (its keys share its tag). A plain queue costs one round trip, and a user
  // whose ACL does not reach `{<base>:*}` one refusal, not a thousand.
  const detail::QueueKeys own = detail::queue_keys(queue);
  const detail::QueueKeys zero =
      detail::queue_keys(detail::partition_stream(base, detail::kMaxPartitions, 0));
  std::vector<Argv> argvs;
  for (const std::string* k : {&own.stream, &own.dlq, &own.delayed, &own.high, &own.low}) {
    argvs.push_back(Argv{"EXISTS", *k});
  }
  argvs.push_back(Argv{"EXISTS", zero.stream, zero.dlq, zero.delayed, zero.high, zero.low});
  const auto first = connected().pipeline(argvs);
  bool own_exists = false;
  for (std::size_t j = 0; j < 5; ++j) own_exists = own_exists || exists(first[j]);
  if (!exists(first[5])) return {queue};
  argvs.clear();
  std::vector<detail::QueueKeys> keys;  // the argvs' strings
  keys.reserve(detail::kMaxPartitions);
  for (int i = 1; i < detail::kMaxPartitions; ++i) {
    const detail::QueueKeys& k =
        keys.emplace_back(detail::queue_keys(detail::partition_stream(base, detail::kMaxPartitions, i)));
    argvs.push_back(Argv{"EXISTS", k.stream, k.dlq, k.delayed, k.high, k.low});
  }
  const auto rest = connected().pipeline(argvs);
  int last = 0;
  for (int i = 1; i < detail::kMaxPartitions; ++i) {
    if (exists(rest[static_cast<std::size_t>(i - 1)])) last = i;
  }
  std::vector<std::string> out;
  for (int i = 0; i <= last; ++i) out.push_back(detail::partition_stream(base, detail::kMaxPartitions, i));
  if (own_exists) out.push_back(queue);
  return out;
}

Inspector::Impl::Target Inspector::Impl::target(const std::vector<std::string>& parts,
                                                const std::string& id) {
  if (parts.size() > 1) {
    for (const std::string& part : parts) {  // (a task id may hold '/' itself)
      if (id.size() > part.size() + 1 && id.starts_with(part) && id[part.size()] == '/') {
        return {part, id.substr(part.size() + 1)};
      }
    }
  }
  return {std::string(), id};
}

std::vector<std::string> Inspector::Impl::parts_with_entry(const std::vector<std::string>& parts,
                                                           const std::string& id, bool dead) {
  std::vector<Argv> argvs;
  std::vector<detail::QueueKeys> keys;  // the argvs' strings
  keys.reserve(parts.size());
  for (const std::string& p : parts) {
    const detail::QueueKeys& k = keys.emplace_back(detail::queue_keys(p));
    if (dead) {
      argvs.push_back(Argv{"XRANGE", k.dlq, id, id});
    } else {
      for (Priority level : kPriorities) argvs.push_back(Argv{"XRANGE", level_stream(k, level), id, id});
    }
  }
  const auto r = connected().pipeline(argvs);
  const std::size_t per = dead ? 1 : 3;
  std::vector<std::string> found;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    for (std::size_t j = 0; j < per; ++j) {
      const ReplyView v = r[i * per + j].view();
      if (v.is_array() && v.size() > 0) {
        found.push_back(parts[i]);
        break;
      }
    }
  }
  return found;
}

void Inspector::Impl::check_unambiguous(const std::string& id, const std::vector<std::string>& found) {
  if (found.size() < 2) return;
  std::string names;
  for (const std::string& f : found) names += (names.empty() ? "" : ", ") + f;
  throw ConfigError("entry id " + id + " is in several partitions (" + names + "): give it as <partition>/" +
                    id);
}

/// Each partitioned queue's partitions (and its queue of one stream of the same name, if any) as
/// one QueueInfo, named as Inspector::parts() would resolve it; everything else as it is.
std::vector<QueueInfo> Inspector::Impl::group_partitions(std::vector<QueueInfo> found) {
  std::map<std::string, std::map<int, QueueInfo>> families;  // base -> index -> partition
  std::vector<QueueInfo> rest;
  for (QueueInfo& q : found) {
    if (const auto p = partition_of(q.name)) {
      families[p->first].emplace(p->second, std::move(q));
    } else {
      rest.push_back(std::move(q));
    }
  }
  for (auto& family : families) {
    const std::string& base = family.first;  // (clang 14 cannot capture a structured binding)
    std::map<int, QueueInfo>& members = family.second;
    if (!members.count(0)) {
      // Not a partitioned queue (as parts() sees it): queues that only look like partitions,
      // e.g. `{tenant:1}` and `{tenant:42}`, each a queue of its own.
      for (auto& [i, q] : members) rest.push_back(std::move(q));
      continue;
    }
    // The queue of one stream the partitions belong to (`orders` or `{orders}`), when it exists.
    auto own = std::find_if(rest.begin(), rest.end(), [&](const QueueInfo& q) {
      return q.partitions.empty() && detail::partition_base(q.name) == base;
    });
    QueueInfo total;
    total.name = own == rest.end() ? base : own->name;
    total.paused = true;
    const int last = members.rbegin()->first;
    for (int i = 0; i <= last; ++i)
      total.partitions.push_back(detail::partition_stream(base, detail::kMaxPartitions, i));
    for (const auto& [i, part] : members) add_part(total, part);
    if (own != rest.end()) {
      total.partitions.push_back(own->name);
      add_part(total, *own);
      rest.erase(own);
    }
    const auto rank = [](Priority p) {
      return std::find(kPriorities.begin(), kPriorities.end(), p) - kPriorities.begin();
    };
    std::sort(total.levels.begin(), total.levels.end(),
              [&](Priority a, Priority b) { return rank(a) < rank(b); });
    rest.push_back(std::move(total));
  }
  std::sort(rest.begin(), rest.end(), [](const QueueInfo& a, const QueueInfo& b) { return a.name < b.name; });
  return rest;
}

}  // namespace streamq
