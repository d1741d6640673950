-- name: the liveness key of a consumer name (src/consumer/name_lock.hpp), which holds
-- "<client id> <token> <ms>": the client that renews it, this run's token, and when it was
-- written (the server's clock).
-- KEYS[1] = the key (<stream>:live:<group length>:<group>:<consumer>)
-- ARGV[1] = 'hold' | 'take' | 'drop', ARGV[2] = this process's token,
-- ARGV[3] = this process's client id, ARGV[4] = the time to live in ms,
-- ARGV[5] = for 'take': the value of the holder found gone (replaced only if still there).
-- 'hold' writes the value when the key is absent or already this token's; 'take' also when it
-- still holds ARGV[5]; 'drop' deletes it if it is this token's. Returns nil when done, else
-- {the holder's value, the server's time in ms}. One script: the check and the write must
-- not interleave with another process's.
-- @include lib/clock.lua
local current = redis.call('GET', KEYS[1])
local ours = current and string.match(current, '^%S+ (%S+) %S+$') == ARGV[2]
if ARGV[1] == 'drop' then
  if ours then redis.call('DEL', KEYS[1]) end
  return false
end
local now = now_ms()
if current and not ours and not (ARGV[1] == 'take' and current == ARGV[5]) then
  return {current, now}
end
redis.call('SET', KEYS[1], ARGV[3] .. ' ' .. ARGV[2] .. ' ' .. now, 'PX', ARGV[4])
return false
