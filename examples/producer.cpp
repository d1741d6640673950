// SPDX-License-Identifier: MIT
// streamq-producer: enqueue tasks from the command line and print their ids.
//
//   streamq-producer --type send_email --payload '{"to":"user@example.com"}' --count 3
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
    "                        [--count 1] [--max-retries N]\n";

}  // namespace

int main(int argc, char** argv) {
  if (example::wants_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{
      {"--url", "redis://127.0.0.1:6379"},           {"--stream", "task_queue"}, {"--type", "send_email"},
      {"--payload", R"({"to":"user@example.com"})"}, {"--count", "1"},           {"--max-retries", ""}};
  int count = 0;
  streamq::EnqueueOptions task_options;
  try {
    example::parse_flags(argc, argv, flags);
    count = example::to_int("--count", flags["--count"], 1);
    if (!flags["--max-retries"].empty()) {
      task_options.max_retries = example::to_int("--max-retries", flags["--max-retries"], 0);
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "streamq-producer: " << e.what() << '\n' << kUsage;
    return 2;
  }

  try {
    streamq::ProducerOptions options{.stream = flags["--stream"]};
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
