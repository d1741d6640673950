// SPDX-License-Identifier: MIT
// Enqueues one task through an installed streamq; prints its id.
#include <iostream>

#include <streamq/streamq.hpp>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: streamq_package_app <redis-url> <stream>\n";
    return 2;
  }
  try {
    streamq::Producer producer({.connection = {.url = argv[1]}, .stream = argv[2]});
    std::cout << producer.enqueue("package_check", nlohmann::json{{"version", streamq::version_string}})
              << '\n';
    return 0;
  } catch (const streamq::Error& e) {
    std::cerr << "streamq: " << e.what() << '\n';
    return 1;
  }
}
