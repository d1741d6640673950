// SPDX-License-Identifier: MIT
// A program built against streamq the way a service would be (installed package,
// add_subdirectory or FetchContent). Enqueues one task and prints its id, then enqueues into a
// key that holds a string and prints the error reply's prefix and message: a streamq linked
// with the wrong hiredis gets the first right and garbles or crashes on the second.
#include <iostream>

#include <streamq/streamq.hpp>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: streamq_package_app <redis-url> <stream> <key-holding-a-string>\n";
    return 2;
  }
  try {
    streamq::Producer producer({.connection = {.url = argv[1]}, .stream = argv[2]});
    std::cout << producer.enqueue("package_check", nlohmann::json{{"version", streamq::version_string}})
              << '\n';
  } catch (const streamq::Error& e) {
    std::cerr << "streamq: " << e.what() << '\n';
    return 1;
  }
  try {
    streamq::Producer wrong({.connection = {.url = argv[1]}, .stream = argv[3]});
    wrong.enqueue("package_check", "{}");
    std::cerr << "enqueue into a string key succeeded\n";
    return 1;
  } catch (const streamq::ReplyError& e) {
    std::cout << e.prefix() << '\n' << e.what() << '\n';
  } catch (const streamq::Error& e) {
    std::cerr << "streamq: expected a ReplyError, got: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
