-- rate: may a task of a rate-limited type start now? A sliding window log of the starts of
-- the last `per` ms, shared by every worker of the group, by the server's clock.
-- KEYS[1] = the type's window (rate_key() in keys.hpp): a sorted set of starts by time
-- ARGV[1] = limit (starts per window), ARGV[2] = per (the window in ms), ARGV[3] = a name for
--           this start, unique to it (a random UUID: entry ids repeat across the partitions and
--           levels that share the window, and a member added twice would count once)
-- Returns 0 when it may start (and the start is recorded), else the ms until the window has
-- room again (>= 1).
-- One script: the check and the record must not interleave with other workers', or two of
-- them could both take the last slot.
-- @include lib/clock.lua
local now = now_ms()
local limit, per = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - per)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, now .. '/' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], per)
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + per - now)
