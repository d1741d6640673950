// SPDX-License-Identifier: MIT
#include "name_holder.hpp"

#include <charconv>
#include <map>

#include "redis/argv.hpp"
#include "redis/connection.hpp"
#include "redis/error_code.hpp"
#include "redis/reply.hpp"
#include "util/concat.hpp"

namespace streamq::detail {
namespace {

/// The `key=` field of a CLIENT LIST line ("" when absent).
std::string client_field(std::string_view line, std::string_view key) {
  const std::string spaced = concat(" ", line);
  const std::string pattern = concat(" ", key, "=");
  const std::size_t at = spaced.find(pattern);
  if (at == std::string::npos) return {};
  const std::size_t from = at + pattern.size();
  return spaced.substr(from, spaced.find_first_of(" \r\n", from) - from);
}

}  // namespace

std::optional<NameHolder> parse_name_holder(std::string_view value) {
  const std::size_t first = value.find(' ');
  const std::size_t last = value.rfind(' ');
  if (first == std::string_view::npos || first == 0 || last == first) return std::nullopt;
  NameHolder h;
  h.client_id = std::string(value.substr(0, first));
  // A client id is 1 to 2^63 - 1 (what CLIENT LIST ID accepts): anything else would make the one
  // CLIENT LIST that looks at every holder at once an error ("Invalid client ID") for all of them.
  std::int64_t id = 0;
  const auto [end, ec] = std::from_chars(h.client_id.data(), h.client_id.data() + h.client_id.size(), id);
  if (ec != std::errc() || end != h.client_id.data() + h.client_id.size() || id < 1) return std::nullopt;
  h.token = std::string(value.substr(first + 1, last - first - 1));
  const std::string_view written = value.substr(last + 1);
  const auto parsed = std::from_chars(written.data(), written.data() + written.size(), h.written_ms);
  if (parsed.ec != std::errc() || parsed.ptr != written.data() + written.size()) return std::nullopt;
  return h;
}

std::vector<HolderLook> look_at_holders(Connection& conn, const std::vector<NameHolder>& holders,
                                        std::int64_t now_ms, std::string* why_unknown) {
  std::vector<HolderLook> looks(holders.size());
  if (holders.empty()) return looks;
  Argv list{"CLIENT", "LIST", "ID"};
  for (const NameHolder& h : holders) list.add(h.client_id);
  const Reply listed = conn.command(list);
  const ReplyView v = listed.view();
  if (v.is_error()) {
    if (error_code(v.error()) != "NOPERM") v.check();
    if (why_unknown != nullptr) *why_unknown = std::string(v.error());
    return looks;  // all unknown
  }
  // One line per listed client: "id=7 addr=... name=... age=12 ...".
  std::map<std::string, std::string, std::less<>> lines;
  const std::string_view text = v.is_string() ? v.str() : std::string_view();
  for (std::size_t from = 0; from < text.size();) {
    std::size_t end = text.find('\n', from);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(from, end - from);
    if (std::string id = client_field(line, "id"); !id.empty()) lines.emplace(std::move(id), line);
    from = end + 1;
  }
  for (std::size_t i = 0; i < holders.size(); ++i) {
    const auto it = lines.find(holders[i].client_id);
    if (it == lines.end()) {
      looks[i].state = HolderLook::State::gone;
      continue;
    }
    // Client ids start again from 1 when Redis restarts: a client connected after the holder's
    // last write is not the holder (the holder was connected when it wrote).
    std::int64_t age_s = 0;
    const std::string age = client_field(it->second, "age");
    std::from_chars(age.data(), age.data() + age.size(), age_s);
    if (age_s * 1000 + 1000 < now_ms - holders[i].written_ms) {
      looks[i].state = HolderLook::State::gone;
      continue;
    }
    looks[i].state = HolderLook::State::live;
    looks[i].client = "client " + holders[i].client_id + " from " + client_field(it->second, "addr") +
                      ", named " + client_field(it->second, "name");
  }
  return looks;
}

}  // namespace streamq::detail
