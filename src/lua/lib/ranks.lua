-- lib/ranks.lua: where a page of a sorted set continues, for listings that page through one
-- while it changes (inspect_delayed.lua, inspect_backlog.lua).
-- Input: rank_after(key, score, member): the rank of the first member of sorted set `key`
--   that comes after `member` at `score` in the set's order, whether `member` is still there
--   at that score or not (it left, or moved to another score): so members that left meanwhile
--   shift nothing. O(log n) lookups, however many members share the score.

-- bytes_less(a, b): a sorts before b as Redis orders members of one score (Lua's own < follows
-- the server's locale).
local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local function rank_after(key, score, member)
  local at = redis.call('ZSCORE', key, member)
  if at and tonumber(at) == tonumber(score) then return redis.call('ZRANK', key, member) + 1 end
  -- Not there at that score: find where it would be. Members of one score are ordered by their
  -- bytes (memcmp, then length), so binary-search the ranks of its score for the first member
  -- after it.
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local hi = lo + redis.call('ZCOUNT', key, score, score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_less(member, redis.call('ZRANGE', key, mid, mid)[1]) then hi = mid else lo = mid + 1 end
  end
  return lo
end
