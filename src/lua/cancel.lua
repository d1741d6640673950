-- cancel: delete a queued task that no consumer of the group has been given, or ask the
-- consumer that holds a delivered one to stop it (Inspector::cancel).
-- KEYS[1] = the stream (one priority level of the queue)
-- ARGV[1] = the consumer group, ARGV[2] = the entry id, ARGV[3] = the queue's stream name
--           (whose uniqueness lock to release), ARGV[4] = how long a cancel request lives (ms)
-- Returns {'cancelled'}, {'missing'} (no such entry: done, cancelled or never there),
-- {'pending', consumer, idle ms, deliveries}: delivered to that consumer and not finished; the
-- cancel request <stream>:cancel:<id> is set (for ARGV[4] ms, or until the task ends
-- cancelled) and its id is pushed to <stream>:cancels, a short stream every consumer follows
-- (XREAD BLOCK): its holder asks the handler to stop at once; the holder's next lease renewal
-- finds the request too (when the push was missed), and a consumer that reclaims the entry
-- ends it cancelled instead of running it (fetch_pending.lua, start.lua), or
-- {'nogroup', group...}: the stream has groups, but not ARGV[1]; nothing is changed (whether
-- the entry was delivered cannot be told without its group). A stream without any group has
-- delivered nothing: its entries are cancelled.
-- One script: the pending check and the XDEL do not interleave with a consumer's read.
-- A cancelled task is finished: its uniqueness lock (unique_key) is released while it still
-- holds this task's id, as a dead letter does (lib/unique.lua).
-- A tracked task's record says cancelled (lib/record.lua).
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
local found = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #found == 0 then return {'missing'} end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) == 'table' and p.err then
  if not string.find(p.err, 'NOGROUP', 1, true) then return redis.error_reply(p.err) end
  local others = {'nogroup'}
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    for i = 1, #g, 2 do
      if g[i] == 'name' then others[#others + 1] = g[i + 1] end
    end
  end
  if #others > 1 then return others end
elseif #p > 0 then
  redis.call('SET', KEYS[1] .. ':cancel:' .. ARGV[2], now_ms(), 'PX', ARGV[4])
  redis.call('XADD', KEYS[1] .. ':cancels', 'MAXLEN', '~', 1000, '*', 'id', ARGV[2])
  return {'pending', p[1][2], p[1][3], p[1][4]}
end
redis.call('XDEL', KEYS[1], ARGV[2])
task_end(ARGV[3], found[1][2], 1, nil, 'cancelled', 'cancelled')
return {'cancelled'}
