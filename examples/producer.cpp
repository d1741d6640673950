// SPDX-License-Identifier: MIT
// streamq-producer: enqueue tasks from the command line and print their ids.
//
//   streamq-producer --type send_email --payload '{"to":"user@example.com"}' --count 3
#include <charconv>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#include <streamq/streamq.hpp>

namespace {

constexpr const char* kUsage =
    "usage: streamq-producer [--url redis://127.0.0.1:6379] [--stream task_queue]\n"
    "                        [--type send_email] [--payload '{\"to\":\"user@example.com\"}']\n"
    "                        [--count 1] [--max-retries N]\n";

/// Reads "--name value" pairs into `flags`, which holds every known flag with its default.
void parse_flags(int argc, char** argv, std::map<std::string, std::string>& flags) {
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (!flags.contains(name)) throw std::invalid_argument("unknown flag " + name);
    if (i + 1 >= argc) throw std::invalid_argument(name + " needs a value");
    flags[name] = argv[i + 1];
  }
}

int to_int(const std::string& name, const std::string& text, int min) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min) {
    throw std::invalid_argument(name + " must be an integer >= " + std::to_string(min));
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{
      {"--url", "redis://127.0.0.1:6379"}, {"--stream", "task_queue"},
      {"--type", "send_email"},            {"--payload", R"({"to":"user@example.com"})"},
      {"--count", "1"},                    {"--max-retries", ""}};
  int count = 0;
  streamq::EnqueueOptions task_options;
  try {
    parse_flags(argc, argv, flags);
    count = to_int("--count", flags["--count"], 1);
    if (!flags["--max-retries"].empty()) {
      task_options.max_retries = to_int("--max-retries", flags["--max-retries"], 0);
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
