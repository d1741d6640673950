-- inspect_delayed: one page of a queue's delayed set, decoded (for streamq::Inspector).
-- KEYS[1] = delayed set
-- ARGV[1] = lowest due time (score) to return, ARGV[2] = how many members at or above it to
--           skip first (the page cursor), ARGV[3] = most members to return
-- Returns one array per member, in due order: {member, score, stream, field, value, ...}, or
-- {member, score} for a member that is not in streamq's format. Read-only, O(log n + count):
-- the members are MessagePack (lib/delayed.lua), which only the server's Lua can decode.
-- @include lib/delayed.lua
local page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT',
                        tonumber(ARGV[2]), tonumber(ARGV[3]))
local out = {}
for i = 1, #page, 2 do
  local item = {page[i], page[i + 1]}
  local parts = delayed_parts(page[i])
  if parts then
    for j = 3, #parts do item[#item + 1] = parts[j] end
  end
  out[#out + 1] = item
end
return out
