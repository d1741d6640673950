-- slot: a lease-backed semaphore (ConcurrencyLimit): at most `limit` tasks hold a slot at once,
-- across every worker, by the server's clock.
-- KEYS[1] = the semaphore: a sorted set of holders by the time their lease ends
--           (`<queue>:running` or `<queue>:running:<task type>`)
-- ARGV[1] = 'acquire' | 'renew' | 'release', ARGV[2] = the holder (a random UUID per start),
-- ARGV[3] = the lease in ms (acquire, renew: claim_min_idle), ARGV[4] = limit (acquire)
-- acquire: drops the holders whose lease ended (their worker died), then takes a slot when
-- fewer than `limit` are held. Returns 1 when taken, 0 when every slot is held.
-- renew: extends the holder's lease if it still holds a slot (1), else 0 (it expired while
-- the worker could not reach the server: the task runs on without it).
-- release: gives the slot back. Returns 1 when it was held.
-- One script: the count and the take must not interleave with other workers', or two of
-- them could both take the last slot. The key lives until the last lease in it ends (consumers
-- with different claim_min_idle share it: a short lease must not end a long one).
-- @include lib/clock.lua
local function keep(now)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #last > 0 then redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now)) end
end
if ARGV[1] == 'release' then return redis.call('ZREM', KEYS[1], ARGV[2]) end
local now = now_ms()
local lease = tonumber(ARGV[3])
if ARGV[1] == 'renew' then
  if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end
  redis.call('ZADD', KEYS[1], now + lease, ARGV[2])
  keep(now)
  return 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], now + lease, ARGV[2])
keep(now)
return 1
