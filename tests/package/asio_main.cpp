// SPDX-License-Identifier: MIT
// Built by the installed-package test when streamq has its asio component: a coroutine that
// enqueues through streamq::asio, run against the server named on the command line.
#include <iostream>
#include <string>

#include <asio.hpp>
#include <streamq/asio.hpp>
#include <streamq/streamq.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: streamq_package_asio_app redis://host:port\n";
    return 2;
  }
  streamq::Producer producer({.connection = {.url = argv[1]}, .stream = "package:asio"});
  asio::io_context io;
  int rc = 1;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const std::string type = "package_check";
        const streamq::Payload payload = std::string("{}");
        const std::string id = co_await producer.async_enqueue(type, payload, asio::use_awaitable);
        std::cout << "enqueued " << id << "\n";
        rc = 0;
      },
      [&](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          std::cerr << "streamq_package_asio_app: " << x.what() << "\n";
        }
      });
  io.run();
  return rc;
}
