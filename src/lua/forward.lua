-- forward: move the delayed tasks that are due (by the server's clock) to their streams.
-- KEYS[1] = delayed set, KEYS[2] = dead-letter stream, KEYS[3] = forwarder lease,
-- KEYS[4..] = the queue's streams (normal, high, low)
-- ARGV[1] = most tasks to move, ARGV[2] = consumer name, ARGV[3] = lease lifetime in ms (0 =
--           leave the lease alone), ARGV[4] = failed_at (for a member that cannot be read),
-- ARGV[5] = the most fields a dead-letter entry keeps
-- Returns {moved, ms until the next task is due (-1: none left), 1 if this consumer holds the
-- lease else 0}.
-- One script: a member is added to its stream and removed from the set together, so any
-- number of forwarders can run at once and each task is moved exactly once, and a crash
-- leaves it in one place or the other. A member's stream must be one of the queue's own
-- (KEYS[4..]); one naming another goes to the normal stream. A member not in streamq's format
-- (someone else's ZADD), or with no fields or more than max_fields, is dead-lettered (reason
-- 'malformed') with its bytes, not dropped.
-- The lease does not make forwarding exclusive: it only tells one consumer to poll often
-- while the others poll rarely, so idle workers do not all hammer the server.
-- @include lib/clock.lua
-- @include lib/delayed.lua
-- @include lib/fate.lua
local now = now_ms()
local most = tonumber(ARGV[1])
local streams = {}
for k = 4, #KEYS do streams[KEYS[k]] = true end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, most)
for _, member in ipairs(due) do
  local parts = delayed_parts(member)
  -- A member with no fields, or more than a task may have, cannot be one XADD: dead-letter it
  -- rather than fail the pass (and every pass after it, on the same member).
  if parts and (#parts < 5 or #parts - 3 > 2 * tonumber(ARGV[5])) then parts = nil end
  if parts then
    local dest = streams[parts[3]] and parts[3] or KEYS[4]
    redis.call('XADD', dest, '*', unpack(parts, 4))
  else
    dead_letter(KEYS[2], {'member', member}, 1, tonumber(ARGV[5]), 'malformed',
                'a member of ' .. KEYS[1] .. ' that is not a streamq task', ARGV[4], '', ARGV[2], KEYS[4])
  end
  redis.call('ZREM', KEYS[1], member)
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
return {#due, next_due, holds}
