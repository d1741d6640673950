-- schedule_tick: enqueue one tick of a periodic task, unless it was handled already.
-- KEYS[1] = stream, KEYS[2] = the schedule's record (schedule_key() in keys.hpp), a hash:
--           tick (ms since the epoch of the newest tick handled), outcome (enqueued, skipped
--           or refused), task_id (the tick's task id), KEYS[3] = the high-priority stream,
--           KEYS[4] = the low-priority stream, KEYS[5] = the delayed set (counted by the gate)
-- ARGV[1] = tick (ms since the epoch), ARGV[2] = '1' when the tick is late (past the misfire
--           grace), '0' when on time, ARGV[3] = missed policy: 'enqueue_once' or 'skip',
--           ARGV[4] = overflow: 'reject' (refuse when the backlog, every priority's stream plus
--           the delayed set as the enqueue script counts it, is >= max_len) or 'trim' (XADD MAXLEN ~),
--           ARGV[5] = max_len, ARGV[6] = the tick's task id, ARGV[7] = the version of the
--           stored definition the tick was computed from, ARGV[8..] = the task's field and
--           value strings
-- Returns {code, detail}:
--   {1, entry id}       enqueued
--   {0, recorded tick}  not newer than the record: another instance (or an earlier run)
--                       handled this tick or a later one; nothing written
--   {2, ''}             recorded as skipped, not enqueued: late, and either the policy is
--                       'skip' or the schedule has no record yet (its first start)
--   {3, backlog}        recorded as refused, not enqueued: the queue was full
--   {4, version}        nothing written: the record holds another definition than ARGV[7]
--                       (changed, or removed: version ''), unless ARGV[7] is the one before a
--                       switch and the tick is at or before the switch (`since`)
--   {5, ''}             nothing written: the schedule is paused
-- One script, so that of all instances racing for a tick exactly one passes the comparison,
-- and the check, the XADD and the record cannot interleave with another instance's. The
-- record only moves forward, so a tick is never enqueued twice, across restarts too.
-- The definition (src/scheduler/definition.hpp): a tick counts only under the definition in
-- force at its time, so that an upsert changing the expression neither runs a tick twice nor
-- drops one at the switch.
local tick = tonumber(ARGV[1])
local r = redis.call('HMGET', KEYS[2], 'tick', 'def', 'version', 'prev_version', 'since', 'paused', 'floor')
local recorded_text = r[1]
if not r[2] then return {4, ''} end
local since = tonumber(r[5]) or 0
if ARGV[7] == r[3] then
  if tick <= since then return {0, tostring(since)} end
elseif not (ARGV[7] == r[4] and tick <= since) then
  return {4, r[3] or ''}
end
if r[6] == '1' then return {5, ''} end
local floor = tonumber(r[7])
if floor and tick <= floor then return {0, r[7]} end
local recorded = tonumber(recorded_text)
if recorded and recorded >= tick then return {0, recorded_text} end

local function record(outcome)
  redis.call('HSET', KEYS[2], 'tick', ARGV[1], 'outcome', outcome, 'task_id', ARGV[6])
  if outcome == 'enqueued' then redis.call('HINCRBY', KEYS[2], 'enqueued', 1) end
end

if ARGV[2] == '1' and (ARGV[3] == 'skip' or not recorded) then
  record('skipped')
  return {2, ''}
end

local max_len = tonumber(ARGV[5])
local id
if ARGV[4] == 'reject' then
  local len = redis.call('XLEN', KEYS[1]) + redis.call('XLEN', KEYS[3]) + redis.call('XLEN', KEYS[4]) +
              redis.call('ZCARD', KEYS[5])
  if len >= max_len then
    record('refused')
    return {3, len}
  end
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 8))
else
  id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', max_len, '*', unpack(ARGV, 8))
end
record('enqueued')
return {1, id}
