-- forget_idle_consumers: the janitor. Removes consumers of the group that have been idle at
-- least ARGV[3] ms and hold no pending entry.
-- KEYS[1] = stream
-- ARGV[1] = group, ARGV[2] = this consumer (never removed), ARGV[3] = min idle ms,
-- ARGV[4] = most consumers to remove in this call.
-- Returns the names removed.
-- One script: XGROUP DELCONSUMER drops the pending entries of the consumer it deletes (they
-- would then be pending nowhere, i.e. lost), so the check that it holds none and the delete
-- must not be separated.
local removed = {}
local min_idle, most = tonumber(ARGV[3]), tonumber(ARGV[4])
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
  if info['name'] ~= ARGV[2] and info['pending'] == 0 and info['idle'] >= min_idle then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed[#removed + 1] = info['name']
    if #removed >= most then break end
  end
end
return removed
