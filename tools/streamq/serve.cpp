// SPDX-License-Identifier: MIT
#include "serve.hpp"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>

#include "output.hpp"

namespace streamq::cli {

std::pair<std::string, int> split_listen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return {listen, 0};
  const std::string digits = listen.substr(colon + 1);
  if (digits.empty() || digits.size() > 5 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return {listen, 0};
  }
  const int port = std::stoi(digits);
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, port > 0 && port < 65536 ? port : 0};
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

LoopbackHosts::LoopbackHosts(const std::string& host, int port) {
  const std::string listening = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  for (const std::string& name :
       {listening, std::string("127.0.0.1"), std::string("localhost"), std::string("[::1]")}) {
    hosts_.push_back(name + ":" + std::to_string(port));
    if (port == 80) hosts_.push_back(name);
  }
}

bool LoopbackHosts::allows(const std::string& host_header) const {
  return std::find(hosts_.begin(), hosts_.end(), host_header) != hosts_.end();
}

const char* LoopbackHosts::why() {
  return "this server answers only to its loopback address, localhost or [::1], with its port";
}

int serve_until_interrupted(httplib::Server& server, const std::string& host, int port,
                            const std::string& what, const std::string& url) {
  if (!server.bind_to_port(host, port)) {
    std::cerr << "streamq " << what << ": cannot listen on " << host << ":" << port << "\n";
    return failed;
  }
  std::cerr << "streamq " << what << ": serving " << url << "\n";
  std::atomic<bool> ended{false};
  std::thread serving([&] {
    server.listen_after_bind();
    ended.store(true);
  });
  // The signal handler only sets a flag (stop() is not async-signal-safe): watch it here.
  while (!interrupted.load() && !ended.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // stop() only ends a server that runs: one interrupted while starting must get there first.
  while (!server.is_running() && !ended.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool by_itself = ended.load();
  server.stop();
  serving.join();
  if (by_itself) std::cerr << "streamq " << what << ": the server stopped by itself\n";
  return by_itself ? failed : ok;
}

}  // namespace streamq::cli
