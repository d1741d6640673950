-- inspect_delayed: one page of a queue's delayed set, decoded (for streamq::Inspector).
-- KEYS[1] = delayed set
-- ARGV[1] = the due time (score) of the previous page's last member ('-inf' for the first page),
-- ARGV[2] = that member ('' for the first page), ARGV[3] = most members to return
-- Returns one array per member, in due order: {member, score, stream, field, value, ...}, or
-- {member, score} for a member that is not in streamq's format. Read-only, O(log n + count):
-- the members are MessagePack (lib/delayed.lua), which only the server's Lua can decode.
-- A page continues right after the previous page's last member (lib/ranks.lua's rank_after:
-- members that left the set meanwhile shift nothing), also when that member itself left.
-- @include lib/delayed.lua
-- @include lib/ranks.lua
local count = tonumber(ARGV[3])
local page
if ARGV[2] == '' then
  page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, count)
else
  local rank = rank_after(KEYS[1], ARGV[1], ARGV[2])
  page = redis.call('ZRANGE', KEYS[1], rank, rank + count - 1, 'WITHSCORES')
end
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
