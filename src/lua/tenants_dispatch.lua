-- tenants_dispatch: the turns of the tenants ahead of a consumer's read (docs/tenants.md): as
-- many tasks as the read may bring move from the backlogs of the tenants whose turn it is into
-- the queue's streams (lib/tenants.lua's tenant_turns, the lowest pass first).
-- KEYS[1] = the queue's stream (its normal level; the tenants' keys are under it)
-- ARGV[1] = most tasks to move, ARGV[2] = a slot's lease (ms: the consumer's claim_min_idle),
-- ARGV[3] = the consumer group
-- Returns {moved, ms until the first waiting tenant is due (-1: none), 1 when any tenant is
-- ready or waiting (the consumer then reads at least every 50 ms) else 0}.
-- Steps: the lease and group are kept for the wake-ups of lib/tenants.lua; the waiting tenants
-- that are due become ready (at the virtual time); then turns, until enough tasks moved or no
-- tenant is ready: the tenant of the lowest pass takes turns until its pass passes the next
-- one's (one ZRANGE for a run of turns: a lone tenant moves the whole read's worth at once).
-- One script: the turns, the limits and the moves must not interleave with another
-- consumer's, nor with an enqueue's or an end's wake-up.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
local WAKE_MOST = 1000  -- due waiting tenants made ready per call
local queue = KEYS[1]
local ready, waiting = queue .. ':tenants:ready', queue .. ':tenants:waiting'
local most, lease, group = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local now = now_ms()

redis.call('HSET', queue .. ':tenants:worker', 'lease', lease, 'group', group)
local due = redis.call('ZRANGEBYSCORE', waiting, '-inf', now, 'LIMIT', 0, WAKE_MOST)
if #due > 0 then
  local vt = redis.call('GET', queue .. ':tenants:pass') or 0
  for _, t in ipairs(due) do
    redis.call('ZREM', waiting, t)
    redis.call('ZADD', ready, vt, t)
  end
end

local defaults, settings = tenant_defaults(queue), {}
local moved, pass = 0, nil
while moved < most do
  local top = redis.call('ZRANGE', ready, 0, 1, 'WITHSCORES')
  if #top == 0 then break end
  local t = top[1]
  settings[t] = settings[t] or tenant_settings(queue, t, defaults)
  local n, last = tenant_turns(queue, t, tonumber(top[2]), tonumber(top[4]) or math.huge, most - moved, now,
                               lease, group, settings[t])
  if n > 0 then moved, pass = moved + n, last end
end
if pass then redis.call('SET', queue .. ':tenants:pass', pass) end
local first = redis.call('ZRANGE', waiting, 0, 0, 'WITHSCORES')
local next_due = -1
if first[2] and first[2] ~= 'inf' then next_due = math.max(0, tonumber(first[2]) - now) end
local active = (first[1] or redis.call('EXISTS', ready) == 1) and 1 or 0
return {moved, next_due, active}
