// SPDX-License-Identifier: MIT
// Runs the programs built against streamq as a service would build them (tests/package: the
// installed package, add_subdirectory, FetchContent) on a private server: each enqueues a
// task, then must report an error reply (WRONGTYPE) intact.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "redis_server.hpp"

namespace streamq::test {
namespace {

/// {mode, program} from STREAMQ_PACKAGE_APPS ("mode=path,mode=path").
std::vector<std::pair<std::string, std::string>> package_apps() {
  std::vector<std::pair<std::string, std::string>> apps;
  const std::string all = STREAMQ_PACKAGE_APPS;
  for (std::size_t start = 0; start < all.size();) {
    const auto end = std::min(all.find(',', start), all.size());
    const std::string item = all.substr(start, end - start);
    const auto eq = item.find('=');
    apps.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    start = end + 1;
  }
  return apps;
}

std::vector<std::string> run_lines(const std::string& command, int& status) {
  std::vector<std::string> lines;
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) {
    status = -1;
    return lines;
  }
  char buf[512];
  while (fgets(buf, sizeof buf, out) != nullptr) {
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    lines.push_back(line);
  }
  status = pclose(out);
  return lines;
}

class Package : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(Package, EnqueuesAndReportsAnErrorReply) {
  RedisServer server;
  Client client(server.url());
  const std::string stream = unique_key();
  const std::string not_a_stream = stream + ":not-a-stream";
  client.cmd({"SET", not_a_stream, "a string"}).view().check();
  int status = 0;
  const auto lines =
      run_lines(GetParam().second + " " + server.url() + " '" + stream + "' '" + not_a_stream + "'", status);
  EXPECT_EQ(status, 0);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].size(), 36u);
  EXPECT_EQ(lines[1], "WRONGTYPE");
  EXPECT_TRUE(lines[2].starts_with("WRONGTYPE Operation against a key holding the wrong kind of value"))
      << lines[2];

  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), lines[0]);
  EXPECT_EQ(Client::get(entries[0].second, "task_type"), "package_check");
}

#ifdef STREAMQ_PACKAGE_ASIO_APP
// The installed package asked for COMPONENTS asio: its program enqueues from a coroutine.
TEST(PackageAsio, ACoroutineEnqueuesThroughTheInstalledComponent) {
  RedisServer server;
  Client client(server.url());
  int status = 0;
  const auto lines = run_lines(std::string(STREAMQ_PACKAGE_ASIO_APP) + " " + server.url(), status);
  EXPECT_EQ(status, 0);
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_TRUE(lines[0].starts_with("enqueued ")) << lines[0];
  const auto entries = client.xrange("package:asio");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ("enqueued " + Client::get(entries[0].second, "task_id"), lines[0]);
}
#endif

INSTANTIATE_TEST_SUITE_P(Builds, Package, ::testing::ValuesIn(package_apps()),
                         [](const auto& build) { return build.param.first; });

}  // namespace
}  // namespace streamq::test
