// SPDX-License-Identifier: MIT
#include "cancel_follower.hpp"

#include <algorithm>
#include <vector>

#include "lease_keeper.hpp"
#include "log.hpp"
#include "streamq/errors.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {
namespace {

constexpr std::int64_t kPage = 100;  // pushes read per stream and read

}  // namespace

CancelFollower::~CancelFollower() {
  request_stop();
  join();
}

void CancelFollower::start() {
  thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
}

void CancelFollower::join() {
  if (thread_.joinable()) thread_.join();
}

void CancelFollower::follow(std::vector<std::string>& positions) {
  const std::uint16_t levels = s_.stream_count();
  if (positions.empty()) {
    // From the newest push on: what came before is the lease renewal's to find.
    for (std::uint16_t level = 0; level < levels; ++level) {
      const Reply r =
          conn_.command(Argv{"XREVRANGE", cancels_key(s_.keys(level).stream), "+", "-", "COUNT", "1"});
      const ReplyView v = r.view().check();
      positions.push_back(v.size() > 0 ? std::string(v[0][0].str()) : "0-0");
    }
  }
  Argv argv{"XREAD", "COUNT"};
  argv.add(kPage).add("BLOCK").add(static_cast<std::int64_t>(s_.opt.block.count())).add("STREAMS");
  for (std::uint16_t level = 0; level < levels; ++level) argv.add_copy(cancels_key(s_.keys(level).stream));
  for (const std::string& p : positions) argv.add(p);
  const Reply r = conn_.command(argv);
  const ReplyView v = r.view().check();
  if (v.is_nil()) return;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string_view key = v[i][0].str();
    for (std::uint16_t level = 0; level < levels; ++level) {
      if (cancels_key(s_.keys(level).stream) != key) continue;
      const ReplyView entries = v[i][1];
      std::vector<std::string> ids;
      for (std::size_t e = 0; e < entries.size(); ++e) {
        positions[level] = std::string(entries[e][0].str());
        const ReplyView fields = entries[e][1];
        for (std::size_t f = 0; f + 1 < fields.size(); f += 2) {
          if (fields[f].str() == "id") ids.emplace_back(fields[f + 1].str());
        }
      }
      ask_cancelled(s_, level, ids);
    }
  }
}

void CancelFollower::main(const std::stop_token& stop) {
  block_sigpipe_for_this_thread();  // library code only runs on this thread
  std::vector<std::string> positions;
  while (!stop.stop_requested()) {
    try {
      if (!conn_.connected()) {
        conn_.connect();
        reader_.connected(conn_);
        positions.clear();  // pushes missed meanwhile are found by the lease renewal
      }
      follow(positions);
      continue;
    } catch (const std::exception& e) {
      conn_.disconnect();
      if (stop.stop_requested()) break;
      log(retry_level(e), std::string("cancel follower: ") + e.what() +
                              "; cancels reach running tasks with the lease renewal until it reads again");
    }
    const Millis delay = conn_.backoff_delay();
    std::unique_lock lock(pause_mutex_);
    pause_cv_.wait_for(lock, stop, std::max(delay, Millis(100)), [] { return false; });
  }
  reader_.finished();
}

}  // namespace streamq::detail
