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

namespace {

constexpr const char* kUsage =
    "usage: streamq-stats [--url redis://127.0.0.1:6379] [--stream task_queue]\n"
    "                     [--group NAME (default: every group)] [--format json|prometheus]\n";

/// Reads "--name value" pairs into `flags`, which holds every known flag with its default.
void parse_flags(int argc, char** argv, std::map<std::string, std::string>& flags) {
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (!flags.contains(name)) throw std::invalid_argument("unknown flag " + name);
    if (i + 1 >= argc) throw std::invalid_argument(name + " needs a value");
    flags[name] = argv[i + 1];
  }
  if (flags["--format"] != "json" && flags["--format"] != "prometheus") {
    throw std::invalid_argument("--format must be json or prometheus");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{{"--url", "redis://127.0.0.1:6379"},
                                           {"--stream", "task_queue"},
                                           {"--group", ""},
                                           {"--format", "json"}};
  try {
    parse_flags(argc, argv, flags);
  } catch (const std::invalid_argument& e) {
    std::cerr << "streamq-stats: " << e.what() << '\n' << kUsage;
    return 2;
  }

  try {
    streamq::StatsOptions options{.stream = flags["--stream"], .group = flags["--group"]};
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
