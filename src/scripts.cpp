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
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4..] = fields of the new entry.
// Returns the new entry id; 0 when the entry is no longer pending (acked or gone);
// -1 when another consumer owns it (it was reclaimed: that consumer decides its fate).
// XACK alone does not check ownership, so the check and the writes share one script.
constexpr const char* kMove = R"lua(
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return id
)lua";

// orphan — the entry's body was deleted while this consumer held it: the fields it had read go
// to the dead-letter stream as a provisional record (replaced by the entry's own completion,
// see `replace`), and the entry leaves the pending list, so no reclaimer dead-letters it again.
// KEYS[1] = stream, KEYS[2] = dlq, KEYS[3] = orphans (hash: entry id -> record id)
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4..] = fields of the record.
// Returns the record id, also when an earlier call wrote it (a retry after a lost reply gets
// the same answer, not a second record); 0 when the entry is no longer pending; -1 when
// another consumer owns it.
constexpr const char* kOrphan = R"lua(
local known = redis.call('HGET', KEYS[3], ARGV[3])
if known then return known end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[3], id)
return id
)lua";

// replace — the retry copy or dead letter of an orphaned entry (see `orphan`) takes the place
// of its provisional record.
// KEYS[1] = dlq (holds the record), KEYS[2] = destination (stream or dlq), KEYS[3] = orphans
// ARGV[1] = record id, ARGV[2] = entry id, ARGV[3..] = fields of the new entry.
// Returns the new entry id, or 0 when the record is gone: someone (an operator's replay or
// delete) already acted on it, so it is no longer this consumer's to decide.
constexpr const char* kReplace = R"lua(
redis.call('HDEL', KEYS[3], ARGV[2])
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
)lua";

// lease — owner-checked lease renewal (heartbeat) or release.
// KEYS[1] = stream
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = idle to set in ms ("0" renews the lease;
//           a large value releases the entries so any reclaimer takes them at once),
// ARGV[4] = delivery count to set ("-1" keeps it; a release of never-started entries sets
//           it back to what it was before they were delivered), ARGV[5..] = entry ids.
// Returns {lost, gone}: ids this consumer must not run or keep (owned by another consumer,
// or no longer pending), and ids still its own whose body was deleted. XCLAIM would silently
// drop a pending id whose entry was deleted (Redis 7), so gone ones are not claimed: the
// caller moves them to the dead-letter stream with the fields it read. XCLAIM ... JUSTID
// keeps the delivery counter; min-idle 0 would steal an entry from its new owner, hence the
// XPENDING check.
constexpr const char* kLease = R"lua(
local owned, lost, gone = {}, {}, {}
for i = 5, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 0 or p[1][2] ~= ARGV[2] then
    lost[#lost + 1] = ARGV[i]
  elseif #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 0 then
    gone[#gone + 1] = ARGV[i]
  else
    owned[#owned + 1] = ARGV[i]
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
return {lost, gone}
)lua";

// fetch_pending — take pending entries to run: reclaim stalled ones from any consumer
// ("auto"), or replay this consumer's own (after a start or a reconnect: "own").
// KEYS[1] = stream, KEYS[2] = dlq
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = mode ("auto" | "own"),
// ARGV[4] = cursor: the last entry id examined ("0-0" to begin), ARGV[5] = most entries to
// take, ARGV[6] = min idle ms (auto), ARGV[7] = max deliveries, ARGV[8] = failed_at text for
// dead-letter entries, ARGV[9..] = ids this consumer holds now (never handed out again).
// Returns {next cursor ("0-0" = the end was reached), {{id, {fields}, deliveries}, ...},
// dead-lettered count}.
//
// "auto" examines at most 100 pending entries per call (XPENDING; bounded like XAUTOCLAIM's
// scan) and acts only on those idle for min idle or longer, whose worker is presumed dead.
// XAUTOCLAIM is not used: on Redis 7 it removes every deleted entry it meets from the PEL,
// idle or not, so it would dead-letter an entry whose live holder is about to run it.
// Claims use JUSTID, which leaves the delivery counter alone: the counter is raised by the
// `start` script only when a handler really starts the entry, so the entries a crashed worker
// had merely prefetched are not charged for its crash; only the ones it was running are.
// Entries whose body is gone (trimmed or XDELed) and entries already started max deliveries
// times (their handler may crash the worker) go to the dead-letter stream here, atomically
// with their removal from the PEL, so neither can vanish between two commands.
constexpr const char* kFetchPending = R"lua(
local stream, dlq, group, me, mode = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local want, min_idle, max_deliveries = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local held = {}
for i = 9, #ARGV do held[ARGV[i]] = true end
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

local start = ARGV[4] == '0-0' and '-' or ('(' .. ARGV[4])
local scan = mode == 'auto' and 100 or want
local p
if mode == 'auto' then
  p = redis.call('XPENDING', stream, group, start, '+', scan)
else
  p = redis.call('XPENDING', stream, group, start, '+', scan, me)
end
local cursor = #p < scan and '0-0' or p[#p][1]
local run = {}
for i, item in ipairs(p) do
  local id, n = item[1], item[4]
  if not held[id] and (mode == 'own' or item[3] >= min_idle) then
    local body = redis.call('XRANGE', stream, id, id)
    if #body == 0 then
      dead_letter(id, nil, 'body_lost', 'body lost: the entry was trimmed or deleted before it was done')
    elseif n >= max_deliveries then
      dead_letter(id, body[1][2], 'max_deliveries', 'started ' .. n .. ' times (limit ' ..
        max_deliveries .. ') without finishing; its worker may have died running it')
    else
      -- auto: take it over; own: reset its idle time, it is queued here now
      redis.call('XCLAIM', stream, group, me, mode == 'auto' and min_idle or 0, id, 'JUSTID')
      run[#run + 1] = {id, body[1][2], n}
      if #run >= want then
        if i < #p then cursor = id end
        break
      end
    end
  end
end
return {cursor, run, dead}
)lua";

// start — record that a handler starts a reclaimed or replayed entry.
// KEYS[1] = stream
// ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4] = new delivery count.
// Returns 1; 0 when this consumer no longer owns the entry (it must not run it); -1 when the
// entry's body is gone (it must not run it either: the caller dead-letters the fields it read).
// XCLAIM ... RETRYCOUNT sets the counter the poison check reads; JUSTID keeps it from being
// bumped a second time; the XPENDING check keeps min-idle 0 from stealing the entry.
constexpr const char* kStart = R"lua(
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
if #redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3]) == 0 then return -1 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
)lua";

// forget_idle_consumers — the janitor: remove consumers of the group that have been idle at
// least ARGV[3] ms and hold no pending entry.
// KEYS[1] = stream
// ARGV[1] = group, ARGV[2] = this consumer (never removed), ARGV[3] = min idle ms,
// ARGV[4] = most consumers to remove in this call.
// Returns the names removed. XGROUP DELCONSUMER drops the pending entries of the consumer it
// deletes (they would be pending nowhere, i.e. lost), so the check that it holds none and the
// delete must be one script.
constexpr const char* kForgetIdleConsumers = R"lua(
local removed = {}
local min_idle, most = tonumber(ARGV[3]), tonumber(ARGV[4])
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
  if info['name'] ~= ARGV[2] and info['pending'] == 0 and info['idle'] >= min_idle then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed[#removed + 1] = info['name']
    if #removed >= most then break end
  end
end
return removed
)lua";

struct Sources {
  std::array<std::string, static_cast<std::size_t>(ScriptId::count_)> text;
  std::array<std::string, static_cast<std::size_t>(ScriptId::count_)> sha;
  Sources() {
    text = {kEnqueue, kMove, kOrphan, kReplace, kLease, kFetchPending, kStart, kForgetIdleConsumers};
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
