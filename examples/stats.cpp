// SPDX-License-Identifier: MIT
// streamq-stats: print a queue's health as JSON or as Prometheus text.
//
//   streamq-stats --stream task_queue --format prometheus
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#include <streamq/streamq.hpp>

#include "flags.hpp"

namespace {

constexpr const char* kUsage =
    "usage: streamq-stats [--url redis://127.0.0.1:6379] [--stream task_queue]\n"
    "                     [--group NAME (default: every group)] [--format json|prometheus]\n"
    "                     [--partitions 1 (> 1: the sum of the queue's partitions)]\n";

}  // namespace

int main(int argc, char** argv) {
  if (example::wants_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{{"--url", "redis://127.0.0.1:6379"},
                                           {"--stream", "task_queue"},
                                           {"--group", ""},
                                           {"--format", "json"},
                                           {"--partitions", "1"}};
  int partitions = 1;
  try {
    example::parse_flags(argc, argv, flags);
    partitions = example::to_int("--partitions", flags["--partitions"], 1);
  } catch (const std::invalid_argument& e) {
    std::cerr << "streamq-stats: " << e.what() << '\n' << kUsage;
    return 2;
  }

  try {
    streamq::StatsOptions options{
        .stream = flags["--stream"], .group = flags["--group"], .partitions = partitions};
    options.connection.url = flags["--url"];
    streamq::StatsReader reader(options);
    const streamq::QueueStats stats = reader.read();
    if (flags["--format"] == "json") {
      std::cout << stats.to_json() << '\n';
    } else {
      std::cout << stats.to_prometheus();
    }
  } catch (const streamq::Error& e) {
    std::cerr << "streamq-stats: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
