// SPDX-License-Identifier: MIT
// The routing state of a Connection made with a redis+cluster:// URL (see Connection).
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "cluster.hpp"
#include "connection.hpp"

namespace streamq::detail {

struct ClusterState {
  SlotMap map;
  bool stale = true;  // read the slot map again before the next command, once nothing is owed
  // One plain connection per master (and per node an ASK sent us to), created when first used.
  std::vector<std::pair<HostPort, std::unique_ptr<Connection>>> links;
  std::deque<Connection*> owed;              // the link of each reply owed, in the order of the commands
  Connection* home = nullptr;                // where commands without keys go: the link used last
  int route_slot = -1;                       // the slot of ConnectionConfig::route_key, -1 without one
  Connection* route_link = nullptr;          // the link connect() set up last for route_slot
  bool multi_waiting = false;                // MULTI appended but not sent: it goes with the next command
  Connection* in_multi = nullptr;            // the link of the open MULTI, until its EXEC or DISCARD
  std::vector<Connection*> sent_since_wait;  // links that carried a command since wait_where_sent()

  void sent_on(Connection* link) {
    if (std::find(sent_since_wait.begin(), sent_since_wait.end(), link) == sent_since_wait.end()) {
      sent_since_wait.push_back(link);
    }
  }
};

template <class F>
auto Connection::cluster_guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    // Replies owed on the other masters' connections can no longer be matched to their
    // commands: everything is dropped, and the slot map is read again before the next command.
    cluster_drop();
    cluster_->stale = true;
    throw;
  }
}

}  // namespace streamq::detail
