// SPDX-License-Identifier: MIT
// Runs the program built against the installed package (tests/package) on a private server.
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "redis_server.hpp"

namespace streamq::test {

TEST(Package, InstalledLibraryEnqueues) {
  RedisServer server;
  const std::string stream = unique_key();
  const std::string command = std::string(STREAMQ_PACKAGE_APP) + " " + server.url() + " '" + stream + "'";
  FILE* out = popen(command.c_str(), "r");
  ASSERT_NE(out, nullptr);
  char line[128] = {};
  const bool got_line = fgets(line, sizeof line, out) != nullptr;
  EXPECT_EQ(pclose(out), 0);
  ASSERT_TRUE(got_line);
  std::string id(line);
  if (!id.empty() && id.back() == '\n') id.pop_back();
  EXPECT_EQ(id.size(), 36u);

  Client client(server.url());
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), id);
  EXPECT_EQ(Client::get(entries[0].second, "task_type"), "package_check");
}

}  // namespace streamq::test
