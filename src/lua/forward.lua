-- forward: move the delayed tasks that are due (by the server's clock) to their streams.
-- KEYS[1] = delayed set, KEYS[2] = dead-letter stream, KEYS[3] = forwarder lease,
-- KEYS[4..] = the queue's streams (normal, high, low)
-- ARGV[1] = most tasks to move, ARGV[2] = consumer name, ARGV[3] = lease lifetime in ms (0 =
--           leave the lease alone), ARGV[4] = failed_at (for a member that cannot be read),
-- ARGV[5] = the most fields a dead-letter entry keeps
-- Returns {moved (or dead-lettered), ms until the next task is due (-1: none left), 1 if this
-- consumer holds the lease else 0}, or, when a write of the pass failed (see below), the
-- server's error followed by " (the forward pass moved <n> before this write failed)".
-- One script: members are removed from the set and added to their streams together, so any
-- number of forwarders can run at once and each task is moved exactly once, and a crash
-- leaves it in one place or the other. A member's stream must be one of the queue's own
-- (KEYS[4..]); one naming another goes to the normal stream. A member not in streamq's format
-- (someone else's ZADD), or with no fields or more than max_fields, is dead-lettered (reason
-- 'malformed') with its bytes, not dropped.
-- The lease does not make forwarding exclusive: it only tells one consumer to poll often
-- while the others poll rarely, so idle workers do not all hammer the server.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/delayed.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
-- @include lib/fate.lua
local now = now_ms()
local most = tonumber(ARGV[1])
local streams = {}
for k = 4, #KEYS do streams[KEYS[k]] = true end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, most)
local count = #due / 2
-- The due members are the set's lowest-ranked (ZRANGEBYSCORE from -inf returns them in rank
-- order, ties by their bytes as ranks are), so one call removes exactly them. It comes first:
-- a removal the server refuses (an ACL without ZREMRANGEBYRANK) then fails the pass before
-- anything is written, where after the XADDs it would repeat them on every pass.
if count > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, count - 1) end
-- The message of an error a protected call returned or raised.
local function message(e)
  return type(e) == 'table' and (e.err or 'error') or tostring(e)
end
local done, failure = 0, nil
for i = 1, count do
  local member = due[2 * i - 1]
  local parts = delayed_parts(member)
  -- A member with no fields, or more than a task may have, cannot be one XADD: dead-letter it
  -- rather than fail the pass (and every pass after it, on the same member).
  if parts and (#parts < 5 or #parts - 3 > 2 * tonumber(ARGV[5])) then parts = nil end
  if parts then
    local dest = streams[parts[3]] and parts[3] or KEYS[4]
    local ok, e = pcall(enter_stream, KEYS[4], dest, parts, 4, #parts)
    if not ok then
      failure = message(e)
      break
    end
    record_due(KEYS[4], parts, 4)
  else
    local ok, e = pcall(dead_letter, KEYS[2], {'member', member}, 1, tonumber(ARGV[5]), 'malformed',
                        'a member of ' .. KEYS[1] .. ' that is not a streamq task', ARGV[4], '', ARGV[2],
                        KEYS[4])
    if not ok then
      failure = message(e)
      break
    end
  end
  done = i
end
-- A write that failed (a stream key of another type, say) ends the pass there: the members
-- before it are moved, it and the ones after it go back with their due times for a later
-- pass, so nothing is moved twice or lost. The server's error comes first (its code is the
-- caller's to classify), then how many this pass moved.
if failure then
  local back = {}
  for i = done + 1, count do
    back[#back + 1] = due[2 * i]
    back[#back + 1] = due[2 * i - 1]
  end
  redis.call('ZADD', KEYS[1], unpack(back))
  return redis.error_reply(failure .. ' (the forward pass moved ' .. done .. ' before this write failed)')
end
local next_due = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then next_due = math.max(0, tonumber(first[2]) - now) end
local holds = 0
local lease = tonumber(ARGV[3])
if lease > 0 then
  local holder = redis.call('GET', KEYS[3])
  if not holder then
    redis.call('SET', KEYS[3], ARGV[2], 'PX', lease)
    holds = 1
  elseif holder == ARGV[2] then
    redis.call('PEXPIRE', KEYS[3], lease)
    holds = 1
  end
end
return {count, next_due, holds}
