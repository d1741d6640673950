-- schedule_store: change a stored schedule's record (src/scheduler/definition.hpp has its
-- fields). The registry and its change counter are the caller's (another slot on Cluster).
-- KEYS[1] = the record (<partition stream>:sched:<name>)
-- ARGV[1] = 'upsert': ARGV[2] = the definition (JSON), ARGV[3] = source ('code' or 'api'),
--           ARGV[4] = now (ms). Returns {0, version} unchanged (the same definition: at most
--           its source is written), {1, version} created, {2, version} changed: the previous
--           version's ticks up to now stay its own (prev_version, since).
--           A paused schedule stays paused.
-- ARGV[1] = 'remove': the definition goes (and with it paused, note, floor, the switch, a
--           buffered tick); the
--           tick, outcome, task_id and enqueued stay, so that adding it again does not run a
--           tick twice. Returns {1, version} or {0, ''} when there was none.
-- ARGV[1] = 'pause': ARGV[2] = the note. {1, ''} or {0, ''} when none.
-- ARGV[1] = 'resume': ARGV[4] = now (ms), the floor: no tick at or before it (ticks missed
--           while paused are not caught up). {1, ''} or {0, ''} when none.
local op = ARGV[1]
local key = KEYS[1]
local r = redis.call('HMGET', key, 'def', 'source', 'version', 'paused')
if op == 'upsert' then
  if r[1] == ARGV[2] then
    if r[2] ~= ARGV[3] then redis.call('HSET', key, 'source', ARGV[3]) end
    return {0, r[3]}
  end
  local version = redis.call('HINCRBY', key, 'version', 1)
  if r[1] then
    redis.call('HSET', key, 'prev_version', r[3], 'since', ARGV[4])
  else
    redis.call('HDEL', key, 'prev_version', 'since')
  end
  redis.call('HSET', key, 'def', ARGV[2], 'source', ARGV[3], 'changed_at', ARGV[4])
  if r[1] then return {2, version} end
  return {1, version}
end
if not r[1] then return {0, ''} end
if op == 'remove' then
  redis.call('HDEL', key, 'def', 'source', 'paused', 'note', 'floor', 'prev_version', 'since', 'changed_at',
             'buffered')
  return {1, redis.call('HINCRBY', key, 'version', 1)}
elseif op == 'pause' then
  redis.call('HSET', key, 'paused', '1', 'note', ARGV[2])
  return {1, ''}
elseif op == 'resume' then
  if r[4] == '1' then
    redis.call('HDEL', key, 'paused', 'note')
    redis.call('HSET', key, 'floor', ARGV[4])
  end
  return {1, ''}
end
return redis.error_reply('ERR schedule_store: unknown operation ' .. tostring(op))
