-- run_delayed: move one delayed task to its stream now, whatever its due time (Inspector::
-- run_now).
-- KEYS[1] = delayed set, KEYS[2..] = the queue's streams (normal, high, low)
-- ARGV[1] = the member
-- Returns the new entry's id, or false when the member is no longer in the set (it became due
-- and a forwarder moved it, or it was cancelled). One script: the member leaves the set and
-- its task enters the stream together, so it cannot be moved twice or lost. A member's stream
-- must be one of the queue's own; one naming another goes to the normal stream, as in forward.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/delayed.lua
-- @include lib/events.lua
-- @include lib/record.lua
local parts = delayed_parts(ARGV[1])
if not parts or #parts < 5 then
  return redis.error_reply('ERR this member of ' .. KEYS[1] .. ' is not a streamq task; the forwarder dead-letters it')
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return false end
local dest = KEYS[2]
for k = 2, #KEYS do
  if KEYS[k] == parts[3] then dest = parts[3] end
end
local id = enter_stream(KEYS[2], dest, parts, 4, #parts)
record_due(KEYS[2], parts, 4)
return id
