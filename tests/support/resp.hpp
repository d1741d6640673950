// SPDX-License-Identifier: MIT
// Test support: RESP text for the unit tests of reply parsing, and one complete reply parsed
// by hiredis' reader.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "redis/reply.hpp"

namespace streamq::test {

struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

/// A RESP bulk string.
inline std::string bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}

/// Parses exactly one complete RESP reply (a test failure when it is incomplete).
inline detail::Reply parse_reply(std::string_view resp) {
  ReaderPtr reader(redisReaderCreate());
  EXPECT_NE(reader, nullptr);
  EXPECT_EQ(redisReaderFeed(reader.get(), resp.data(), resp.size()), REDIS_OK);
  void* out = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.get(), &out), REDIS_OK);
  EXPECT_NE(out, nullptr) << "incomplete RESP in the test: " << resp;
  return detail::Reply(static_cast<redisReply*>(out));
}

}  // namespace streamq::test
