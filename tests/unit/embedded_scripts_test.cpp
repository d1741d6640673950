// SPDX-License-Identifier: MIT
// The Lua scripts as the library embeds them (no server): each under its file name with a
// hash of the right form, the shared Lua included where it is used and nowhere else, and the
// fields the dead-letter builder sets the ones the codec reserves.
#include <gtest/gtest.h>

#include <cstddef>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "redis/scripts.hpp"
#include "wire/codec.hpp"

namespace {

TEST(Scripts, EachIsEmbeddedUnderItsFileName) {
  // ScriptId's order is the order of STREAMQ_LUA_SCRIPTS in CMakeLists.txt.
  using streamq::detail::script_name;
  using streamq::detail::ScriptId;
  EXPECT_EQ(script_name(ScriptId::enqueue), "enqueue");
  EXPECT_EQ(script_name(ScriptId::move), "move");
  EXPECT_EQ(script_name(ScriptId::orphan), "orphan");
  EXPECT_EQ(script_name(ScriptId::replace), "replace");
  EXPECT_EQ(script_name(ScriptId::lease), "lease");
  EXPECT_EQ(script_name(ScriptId::fetch_pending), "fetch_pending");
  EXPECT_EQ(script_name(ScriptId::start), "start");
  EXPECT_EQ(script_name(ScriptId::forget_idle_consumers), "forget_idle_consumers");
  EXPECT_EQ(script_name(ScriptId::forward), "forward");
  EXPECT_EQ(script_name(ScriptId::release), "release");
  std::set<std::string_view> shas;
  for (std::size_t i = 0; i < static_cast<std::size_t>(ScriptId::count_); ++i) {
    const auto id = static_cast<ScriptId>(i);
    const std::string source(streamq::detail::script_source(id));
    EXPECT_TRUE(source.starts_with("-- " + std::string(script_name(id)) + ": ")) << script_name(id);
    EXPECT_EQ(source.find("-- @include"), std::string::npos)
        << script_name(id) << ": an include left unexpanded";
    const std::string sha(streamq::detail::script_sha(id));
    EXPECT_TRUE(std::regex_match(sha, std::regex("[0-9a-f]{40}"))) << sha;
    shas.insert(streamq::detail::script_sha(id));
  }
  EXPECT_EQ(shas.size(), static_cast<std::size_t>(ScriptId::count_));
}

TEST(Scripts, SharedLuaIsIncludedWhereItIsUsed) {
  using streamq::detail::ScriptId;
  for (ScriptId id : {ScriptId::move, ScriptId::orphan, ScriptId::lease, ScriptId::start}) {
    EXPECT_NE(streamq::detail::script_source(id).find("local function pending_owner("), std::string::npos)
        << streamq::detail::script_name(id);
  }
  for (ScriptId id : {ScriptId::move, ScriptId::orphan, ScriptId::replace, ScriptId::fetch_pending}) {
    EXPECT_NE(streamq::detail::script_source(id).find("local function dead_letter("), std::string::npos)
        << streamq::detail::script_name(id);
  }
  for (ScriptId id : {ScriptId::enqueue, ScriptId::forward, ScriptId::move}) {
    EXPECT_NE(streamq::detail::script_source(id).find("local function delayed_member("), std::string::npos)
        << streamq::detail::script_name(id);
    EXPECT_NE(streamq::detail::script_source(id).find("local function now_ms("), std::string::npos)
        << streamq::detail::script_name(id);
  }
  // Where it is not used, it is not included either.
  EXPECT_EQ(streamq::detail::script_source(ScriptId::enqueue).find("local function dead_letter("),
            std::string::npos);
  EXPECT_EQ(streamq::detail::script_source(ScriptId::enqueue).find("local function pending_owner("),
            std::string::npos);
  EXPECT_EQ(streamq::detail::script_source(ScriptId::rate).find("local function delayed_member("),
            std::string::npos);
}

TEST(Scripts, TheLuaDeadLetterBuilderSetsTheFieldsTheCodecReserves) {
  // src/lua/lib/fate.lua names the fields it sets; the codec refuses them as extra fields.
  const std::string_view source = streamq::detail::script_source(streamq::detail::ScriptId::move);
  const auto begin = source.find("local meta = {");
  ASSERT_NE(begin, std::string_view::npos);
  const std::string meta(source.substr(begin, source.find('}', begin) - begin));
  std::vector<std::string> named;
  const std::regex name("'([a-z_]+)', [a-z_]+");
  for (auto it = std::sregex_iterator(meta.begin(), meta.end(), name); it != std::sregex_iterator(); ++it) {
    named.push_back((*it)[1]);
  }
  std::vector<std::string> reserved;
  for (std::string_view f : streamq::detail::dead_letter_fields) {
    reserved.emplace_back(f);
    EXPECT_TRUE(streamq::detail::is_reserved_field(f)) << f;
  }
  EXPECT_EQ(named, reserved);
}

}  // namespace
