// SPDX-License-Identifier: MIT
// What the flow tests' handlers saw: how often each task ran, and what each parent read of its
// children (Task::children_results).
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <streamq/streamq.hpp>

namespace streamq::test {

struct Runs {
  std::mutex mutex;
  std::map<std::string, int> count;
  std::map<std::string, std::vector<ChildResult>> read;

  void add(const Task& t) {
    std::lock_guard lock(mutex);
    ++count[t.id()];
    read[t.id()] = t.children_results();
  }
  int of(const std::string& id) {
    std::lock_guard lock(mutex);
    return count.count(id) ? count[id] : 0;
  }
  std::vector<ChildResult> read_by(const std::string& id) {
    std::lock_guard lock(mutex);
    return read[id];
  }
  /// The results parent `id` read, in its children's order.
  std::vector<std::string> results_read_by(const std::string& id) {
    std::vector<std::string> out;
    for (const ChildResult& r : read_by(id)) out.push_back(r.result);
    return out;
  }
};

/// The handlers of the fan-out tests: "square" returns the square of its payload's "i", "sum"
/// (the callback) is counted; both in `runs`.
inline void on_squares(Consumer& c, Runs& runs) {
  c.on("square", [&](const Task& t) {
    const int i = t.json()["i"].get<int>();
    runs.add(t);
    t.set_result(std::to_string(i * i));
  });
  c.on("sum", [&](const Task& t) { runs.add(t); });
}

/// The handlers of the tests that replay a failed child: "flaky" fails its first attempt of all
/// (`attempts` counts them) and then returns "2", "ok" returns "1", "parent" is counted in `runs`.
inline void on_flaky_flow(Consumer& c, Runs& runs, std::atomic<int>& attempts) {
  c.on("flaky", [&](const Task& t) {
    if (attempts.fetch_add(1) == 0) throw std::runtime_error("first time");
    t.set_result("2");
  });
  c.on("ok", [](const Task& t) { t.set_result("1"); });
  c.on("parent", [&](const Task& t) { runs.add(t); });
}

}  // namespace streamq::test
