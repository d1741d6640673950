// SPDX-License-Identifier: MIT
// streamq-producer: enqueue tasks from the command line and print their ids.
//
//   streamq-producer --type send_email --payload '{"to":"user@example.com"}' --count 3
#include <chrono>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#include <streamq/streamq.hpp>

#include "flags.hpp"

namespace {

constexpr const char* kUsage =
    "usage: streamq-producer [--url redis://127.0.0.1:6379] [--stream task_queue]\n"
    "                        [--type send_email] [--payload '{\"to\":\"user@example.com\"}']\n"
    "                        [--count 1] [--max-retries N] [--delay-ms MS]\n"
    "                        [--priority high|normal|low] [--partitions 1]\n";

}  // namespace

int main(int argc, char** argv) {
  if (example::wants_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{{"--url", "redis://127.0.0.1:6379"},
                                           {"--stream", "task_queue"},
                                           {"--type", "send_email"},
                                           {"--payload", R"({"to":"user@example.com"})"},
                                           {"--count", "1"},
                                           {"--max-retries", ""},
                                           {"--delay-ms", "0"},
                                           {"--priority", "normal"},
                                           {"--partitions", "1"}};
  int count = 0;
  int partitions = 1;
  streamq::EnqueueOptions task_options;
  try {
    example::parse_flags(argc, argv, flags);
    count = example::to_int("--count", flags["--count"], 1);
    partitions = example::to_int("--partitions", flags["--partitions"], 1);
    if (!flags["--max-retries"].empty()) {
      task_options.max_retries = example::to_int("--max-retries", flags["--max-retries"], 0);
    }
    // Delayed tasks wait in <stream>:delayed until a worker's forwarder moves them.
    task_options.delay = std::chrono::milliseconds(example::to_int("--delay-ms", flags["--delay-ms"], 0));
    const std::string& priority = flags["--priority"];
    if (priority == "high") {
      task_options.priority = streamq::Priority::high;
    } else if (priority == "low") {
      task_options.priority = streamq::Priority::low;
    } else if (priority != "normal") {
      throw std::invalid_argument("--priority must be high, normal or low");
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "streamq-producer: " << e.what() << '\n' << kUsage;
    return 2;
  }

  try {
    streamq::ProducerOptions options{.stream = flags["--stream"], .partitions = partitions};
    options.connection.url = flags["--url"];
    streamq::Producer producer(options);
    const std::string_view payload = flags["--payload"];  // JSON text, validated by enqueue
    for (int i = 0; i < count; ++i) {
      std::cout << producer.enqueue(flags["--type"], payload, task_options) << '\n';
    }
  } catch (const streamq::Error& e) {
    std::cerr << "streamq-producer: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
