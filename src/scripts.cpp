// SPDX-License-Identifier: MIT
#include "scripts.hpp"

#include <cstdio>
#include <cstring>

namespace streamq::detail {
namespace {

// enqueue — add a batch of tasks unless the backlog would exceed max_len.
// KEYS[1] = stream
// ARGV[1] = max_len, ARGV[2] = n (tasks), then per task: m (number of field/value strings)
//           followed by the m strings.
// Returns n, or the error "QUEUEFULL ..." (nothing written). Callers know their tasks by
// task_id, so the entry ids are not sent back (building that reply costs Redis ~10%).
// streamq deletes finished entries, so XLEN is the unfinished backlog; adding only while it
// stays <= max_len means no XADD here ever needs MAXLEN, so no unread task is ever trimmed.
constexpr const char* kEnqueue = R"lua(
local max_len = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local len = redis.call('XLEN', KEYS[1])
if len + n > max_len then
  return redis.error_reply('QUEUEFULL ' .. KEYS[1] .. ' holds ' .. len ..
    ' unfinished tasks; adding ' .. n .. ' would exceed max_len ' .. max_len)
end
local i = 3
for t = 1, n do
  local m = tonumber(ARGV[i])
  redis.call('XADD', KEYS[1], '*', unpack(ARGV, i + 1, i + m))
  i = i + m + 1
end
return n
)lua";

// move — owner-checked retry or dead-letter of one entry.
// KEYS[1] = stream, KEYS[2] = destination (the stream itself for a retry copy, or the dlq)
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id,
// ARGV[4] = MAXLEN ~ for the destination XADD ("0" = none), ARGV[5..] = fields of the new entry.
// Returns the new entry id; 0 when the entry is no longer pending (acked or gone);
// -1 when another consumer owns it (it was reclaimed: that consumer decides its fate).
// XACK alone does not check ownership, so the check and the writes share one script.
constexpr const char* kMove = R"lua(
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
local id
if ARGV[4] ~= '0' then
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, 5))
else
  id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 5))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return id
)lua";

// lease — owner-checked lease renewal (heartbeat) or release.
// KEYS[1] = stream
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = idle to set in ms ("0" renews the lease;
//           a large value releases the entries so any reclaimer takes them at once),
// ARGV[4] = delivery count to set ("-1" keeps it; a release of never-started entries sets
//           it back to what it was before they were delivered), ARGV[5..] = entry ids.
// Returns the ids this consumer must not run or keep: owned by another consumer, acked, or
// whose body is gone. XCLAIM would silently drop a pending id whose entry was trimmed
// (Redis 7), so those are left alone: they idle out, and a reclaimer's XAUTOCLAIM reports
// them as deleted and dead-letters them (body_lost). XCLAIM ... JUSTID keeps the delivery
// counter; min-idle 0 would steal an entry from its new owner, hence the XPENDING check.
constexpr const char* kLease = R"lua(
local owned = {}
local lost = {}
for i = 5, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] and #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 1 then
    owned[#owned + 1] = ARGV[i]
  else
    lost[#lost + 1] = ARGV[i]
  end
end
if #owned > 0 then
  local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
  for _, id in ipairs(owned) do args[#args + 1] = id end
  args[#args + 1] = 'IDLE'
  args[#args + 1] = ARGV[3]
  if ARGV[4] ~= '-1' then
    args[#args + 1] = 'RETRYCOUNT'
    args[#args + 1] = ARGV[4]
  end
  args[#args + 1] = 'JUSTID'
  redis.call(unpack(args))
end
return lost
)lua";

// fetch_pending — take pending entries to run: reclaim idle ones from any consumer
// (XAUTOCLAIM), or replay this consumer's own (after a start or a reconnect).
// KEYS[1] = stream, KEYS[2] = dlq
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = mode ("auto" | "own"),
// ARGV[4] = cursor (auto: XAUTOCLAIM start id; own: exclusive start id, "-" to begin),
// ARGV[5] = count, ARGV[6] = min idle ms (auto), ARGV[7] = max deliveries,
// ARGV[8] = failed_at text for dead-letter entries, ARGV[9..] = ids this consumer is
//           running now (never handed out again).
// Returns {next cursor ("0-0" = done), {{id, {fields}, deliveries}, ...}, dead-lettered count}.
//
// Claims use JUSTID, which leaves the delivery counter alone: the counter is raised by the
// `start` script only when a handler really starts the entry. So the entries a crashed worker
// had merely prefetched are not charged for its crash; only the ones it was running are.
// Entries whose body is gone (trimmed or XDELed: XAUTOCLAIM's third reply element on 7.0,
// an empty XRANGE otherwise) and entries already started max deliveries times (their handler
// may crash the worker) go to the dead-letter stream here, atomically with their removal
// from the PEL, so neither can vanish between two commands.
constexpr const char* kFetchPending = R"lua(
local stream, dlq, group, me = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local max_deliveries = tonumber(ARGV[7])
local running = {}
for i = 9, #ARGV do running[ARGV[i]] = true end
local reserved = {error = true, failed_at = true, original_id = true, consumer = true, reason = true}
local dead = 0
local function dead_letter(id, fields, reason, err)
  local args = {}
  if fields then
    local dropped = 0
    for i = 1, #fields, 2 do
      if reserved[fields[i]] then
        -- replaced below
      elseif #args >= 2000 then
        dropped = dropped + 1  -- unpack() cannot pass ~8000 values; keep 1000 fields
      else
        args[#args + 1] = fields[i]
        args[#args + 1] = fields[i + 1]
      end
    end
    if dropped > 0 then
      args[#args + 1] = 'fields_dropped'
      args[#args + 1] = tostring(dropped)
    end
  end
  for _, v in ipairs({'error', err, 'failed_at', ARGV[8], 'original_id', id,
                      'consumer', me, 'reason', reason}) do
    args[#args + 1] = v
  end
  redis.call('XADD', dlq, '*', unpack(args))
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
  dead = dead + 1
end
local function lost(id)
  dead_letter(id, nil, 'body_lost',
    'body lost: the entry was trimmed or deleted before it was done')
end

local claimed = {}  -- {id, deliveries} now owned by this consumer, not running here
local cursor = '0-0'
if ARGV[3] == 'auto' then
  local r = redis.call('XAUTOCLAIM', stream, group, me, ARGV[6], ARGV[4], 'COUNT', ARGV[5], 'JUSTID')
  cursor = r[1]
  for _, id in ipairs(r[2]) do
    if not running[id] then
      local p = redis.call('XPENDING', stream, group, id, id, 1)
      claimed[#claimed + 1] = {id, (p[1] and p[1][4]) or 1}
    end
  end
  for _, id in ipairs(r[3] or {}) do lost(id) end
else
  local start = ARGV[4] == '-' and '-' or ('(' .. ARGV[4])
  local p = redis.call('XPENDING', stream, group, start, '+', ARGV[5], me)
  for _, item in ipairs(p) do
    cursor = item[1]
    if not running[item[1]] then claimed[#claimed + 1] = {item[1], item[4]} end
  end
end

local run = {}
for _, c in ipairs(claimed) do
  local id, n = c[1], c[2]
  local body = redis.call('XRANGE', stream, id, id)
  if #body == 0 then
    lost(id)
  elseif n >= max_deliveries then
    dead_letter(id, body[1][2], 'max_deliveries', 'started ' .. n .. ' times (limit ' ..
      max_deliveries .. ') without finishing; its worker may have died running it')
  else
    if ARGV[3] == 'own' then
      redis.call('XCLAIM', stream, group, me, 0, id, 'JUSTID')  -- reset idle: it is queued here
    end
    run[#run + 1] = {id, body[1][2], n}
  end
end
return {cursor, run, dead}
)lua";

// start — record that a handler starts a reclaimed or replayed entry.
// KEYS[1] = stream
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4] = new delivery count.
// Returns 1, or 0 when this consumer no longer owns the entry or its body is gone (then it
// must not run it; a body-less entry idles out and is dead-lettered by a reclaimer).
// XCLAIM ... RETRYCOUNT sets the counter the poison check reads; JUSTID keeps it from being
// bumped a second time; the XPENDING check keeps min-idle 0 from stealing the entry.
constexpr const char* kStart = R"lua(
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
if #redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3]) == 0 then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
)lua";

struct Sources {
  std::array<std::string, static_cast<std::size_t>(ScriptId::count_)> text;
  std::array<std::string, static_cast<std::size_t>(ScriptId::count_)> sha;
  Sources() {
    text = {kEnqueue, kMove, kLease, kFetchPending, kStart};
    for (std::size_t i = 0; i < text.size(); ++i) sha[i] = sha1_hex(text[i]);
  }
};

const Sources& sources() {
  static const Sources s;
  return s;
}

std::uint32_t rol(std::uint32_t v, int n) { return (v << n) | (v >> (32 - n)); }

}  // namespace

std::string sha1_hex(std::string_view data) {
  std::uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::string msg(data);
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  msg.push_back(static_cast<char>(0x80));
  while (msg.size() % 64 != 56) msg.push_back('\0');
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<char>((bits >> (i * 8)) & 0xFF));
  for (std::size_t off = 0; off < msg.size(); off += 64) {
    std::uint32_t w[80];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(msg.data() + off + i * 4);
      w[i] = (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
    }
    for (int i = 16; i < 80; ++i) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
      else if (i < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
      else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
      else { f = b ^ c ^ d; k = 0xCA62C1D6; }
      const std::uint32_t t = rol(a, 5) + f + e + k + w[i];
      e = d; d = c; c = rol(b, 30); b = a; a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
  }
  char out[41];
  for (int i = 0; i < 5; ++i) std::snprintf(out + i * 8, 9, "%08x", h[i]);
  return std::string(out, 40);
}

const std::string& script_source(ScriptId id) { return sources().text[static_cast<std::size_t>(id)]; }
const std::string& script_sha(ScriptId id) { return sources().sha[static_cast<std::size_t>(id)]; }

bool ScriptRunner::known(ScriptId id) const {
  return known_generation_[static_cast<std::size_t>(id)] == conn_.generation() && conn_.connected();
}

void ScriptRunner::mark_known(ScriptId id) {
  known_generation_[static_cast<std::size_t>(id)] = conn_.generation();
}

Argv ScriptRunner::begin(ScriptId id, int numkeys) const {
  Argv argv;
  if (known(id)) {
    argv.add("EVALSHA").add(script_sha(id));
  } else {
    argv.add("EVAL").add(script_source(id));
  }
  argv.add(static_cast<std::int64_t>(numkeys));
  return argv;
}

bool ScriptRunner::is_noscript(const Reply& r) {
  return r.view().is_error() && r.view().error().starts_with("NOSCRIPT");
}

void ScriptRunner::use_eval(ScriptId id, Argv& argv) {
  argv.set(0, "EVAL");
  argv.set(1, script_source(id));
}

Reply ScriptRunner::call(ScriptId id, Argv& argv) {
  Reply r = conn_.command(argv);
  if (is_noscript(r)) {
    use_eval(id, argv);
    r = conn_.command(argv);
  }
  if (!r.view().is_error() || !is_noscript(r)) mark_known(id);
  return r;
}

std::vector<Reply> ScriptRunner::call_pipelined(const std::vector<ScriptId>& ids,
                                                std::vector<Argv>& argvs) {
  for (const Argv& argv : argvs) conn_.append(argv);
  return collect(ids, argvs);
}

std::vector<Reply> ScriptRunner::collect(const std::vector<ScriptId>& ids, std::vector<Argv>& argvs) {
  std::vector<Reply> replies;
  replies.reserve(argvs.size());
  for (std::size_t i = 0; i < argvs.size(); ++i) replies.push_back(conn_.read_reply());
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (ids[i] == not_a_script) continue;
    if (is_noscript(replies[i])) {
      use_eval(ids[i], argvs[i]);
      replies[i] = conn_.command(argvs[i]);
    }
    mark_known(ids[i]);
  }
  return replies;
}

}  // namespace streamq::detail
