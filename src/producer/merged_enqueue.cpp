// SPDX-License-Identifier: MIT
#include "merged_enqueue.hpp"

#include <string>

#include "streamq/errors.hpp"

namespace streamq::detail {

Argv MergedEnqueue::build(const std::vector<const void*>& items) const {
  std::vector<const Prepared*> tasks;
  tasks.reserve(items.size());
  for (const void* item : items) tasks.push_back(static_cast<const Prepared*>(item));
  return build_(tasks);
}

std::exception_ptr MergedEnqueue::outcome(const Reply& reply, std::size_t i, std::size_t n) const {
  try {
    const ReplyView r = reply.view();
    r.check();
    if (!r.is_array() || r.size() != n) throw ReplyError("ERR enqueue: unexpected reply to a merged call");
    const ReplyView mine = r[i];
    if (mine.is_error() && mine.error().starts_with("QUEUEFULL"))
      throw QueueFullError(std::string(mine.error()));
    mine.check();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace streamq::detail
