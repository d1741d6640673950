-- inspect_delayed: one page of a queue's delayed set, decoded (for streamq::Inspector).
-- KEYS[1] = delayed set
-- ARGV[1] = the due time (score) of the previous page's last member ('-inf' for the first page),
-- ARGV[2] = that member ('' for the first page), ARGV[3] = most members to return
-- Returns one array per member, in due order: {member, score, stream, field, value, ...}, or
-- {member, score} for a member that is not in streamq's format. Read-only, O(log n + count):
-- the members are MessagePack (lib/delayed.lua), which only the server's Lua can decode.
-- A page continues right after the previous page's last member (by rank, so members that
-- left the set meanwhile shift nothing), also when that member itself left.
-- @include lib/delayed.lua
-- bytes_less(a, b): a sorts before b as Redis orders members of one score (Lua's own < follows
-- the server's locale).
local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local count = tonumber(ARGV[3])
local page
if ARGV[2] == '' then
  page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, count)
else
  local rank = redis.call('ZRANK', KEYS[1], ARGV[2])
  if not rank then
    -- That member left: find where it would be. Members of one score are ordered by their
    -- bytes (memcmp, then length), so binary-search the ranks of its score for the first
    -- member after it: O(log n) lookups, however many share the millisecond (a delayed batch).
    local lo = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
    local hi = lo + redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1])
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if bytes_less(ARGV[2], redis.call('ZRANGE', KEYS[1], mid, mid)[1]) then hi = mid else lo = mid + 1 end
    end
    rank = lo - 1
  end
  page = redis.call('ZRANGE', KEYS[1], rank + 1, rank + count, 'WITHSCORES')
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
