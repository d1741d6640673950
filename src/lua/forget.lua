-- forget: delete dead letters and the records of their tracked tasks (Inspector::delete_dead,
-- ::purge_dead): a dead task's record lives as long as its dead letter when its retention
-- says so (dead ms -1, lib/record.lua), so it goes with it.
-- KEYS[1] = dead-letter stream
-- ARGV[1] = the queue's stream (the records' prefix), ARGV[2] = '1' to delete the dead-letter
-- stream's key when this leaves it empty (a purge), ARGV[3..] = dead-letter entry ids
-- Returns how many dead letters were deleted.
-- One script: a dead letter and its record go together.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/events.lua
-- @include lib/record.lua
local deleted = 0
for i = 3, #ARGV do
  local found = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #found > 0 then
    local id = tracked(found[1][2], 1)
    if id then
      local key = ARGV[1] .. ':task:' .. id
      if redis.call('HGET', key, 'state') == 'dead' then redis.call('DEL', key) end
    end
    deleted = deleted + redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
if ARGV[2] == '1' and redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[1]) end
return deleted
