-- schedule_tick: enqueue one tick of a periodic task, unless it was handled already.
-- KEYS[1] = the queue's stream (normal priority; the prefix of the task records),
-- KEYS[2] = the schedule's record (schedule_key() in keys.hpp; its fields are listed in
--           src/scheduler/definition.hpp), KEYS[3] = the high-priority stream, KEYS[4] = the
--           low-priority stream, KEYS[5] = the delayed set (counted by the gate), KEYS[6] = the
--           record's ticks set (ticks_key(): a sorted set of the enqueued ticks, score = tick ms)
-- ARGV[1] = mode: 'tick' (a tick fell due), 'release' (the buffered tick ARGV[2], once the
--           previous task ended) or 'backfill' (Schedules::backfill: the tick ARGV[2] unless
--           it is in the ticks set; the record's tick does not move)
-- ARGV[2] = tick (ms since the epoch), ARGV[3] = '1' when the tick is late (past the misfire
--           grace), '0' when on time, ARGV[4] = missed policy: 'enqueue_once' or 'skip',
--           ARGV[5] = overflow: 'reject' (refuse when the backlog, every priority's stream plus
--           the delayed set as the enqueue script counts it, is >= max_len) or 'trim' (XADD MAXLEN ~),
--           ARGV[6] = max_len, ARGV[7] = the tick's task id, ARGV[8] = the version of the
--           stored definition the tick was computed from, ARGV[9] = the KEYS index of the
--           stream the task goes to (1, 3 or 4: its priority), ARGV[10] = limit ('' = none),
--           ARGV[11] = overlap: 'allow', 'skip' or 'buffer_one', ARGV[12] = the newest late
--           tick of the caller's batch (ms; a first start records the ticks up to it as skipped),
--           ARGV[13..] = the task's field and value strings (with `retention` when tracked)
-- Returns {code, detail}:
--   {1, entry id, enqueued}  enqueued (enqueued: the record's count since, what limit counts)
--   {0, recorded tick, buffered tick or ''}  not newer than the record: another instance (or
--                       an earlier run) handled this tick or a later one; nothing written.
--                       'release': the tick is no longer buffered. 'backfill': in the ticks set
--   {2, why}            recorded as skipped, not enqueued: 'missed' (late, policy 'skip'),
--                       'first' (late, the schedule has no record yet: its first start) or
--                       'overlap' (the previous tick's task has not ended: Overlap::skip, or
--                       buffer_one with a tick buffered already)
--   {3, backlog}        recorded as refused, not enqueued: the queue was full
--   {4, version}        nothing written: the record holds another definition than ARGV[8]
--                       (changed, or removed: version ''), unless ARGV[8] is the one before a
--                       switch and the tick is at or before the switch (`since`)
--   {5, ''}             nothing written: the schedule is paused
--   {6, 'limit'}        nothing written: `enqueued` reached ARGV[10]
--   {7, ''}             recorded as buffered (Overlap::buffer_one): a 'release' call enqueues
--                       it once the previous task ended
--   {8, running id}     'release': nothing written, the previous task has not ended yet
-- One script, so that of all instances racing for a tick exactly one passes the comparison,
-- and the check, the XADD and the record cannot interleave with another instance's. The
-- record only moves forward, so a tick is never enqueued twice, across restarts too.
-- The definition (src/scheduler/definition.hpp): a tick counts only under the definition in
-- force at its time, so that an upsert changing the expression neither runs a tick twice nor
-- drops one at the switch.
-- Overlap: the record's running_id is the task of the last tick enqueued (by the schedule, not
-- a backfill); whether it has ended is read from its task record (lib/record.lua: none, or a
-- final state) in this same call that then adds or refuses the tick, so no instance can enqueue
-- a tick between another's read and its write.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/events.lua
-- @include lib/record.lua
local TICKS_KEEP = 10000  -- enqueued ticks the ticks set remembers (the newest)
local mode = ARGV[1]
local tick = tonumber(ARGV[2])
local r = redis.call('HMGET', KEYS[2], 'tick', 'def', 'version', 'prev_version', 'since', 'paused', 'floor',
                     'enqueued', 'running_id', 'buffered')
local recorded_text = r[1]
if not r[2] then return {4, ''} end
local since = tonumber(r[5]) or 0
if ARGV[8] == r[3] then
  if mode == 'tick' and tick <= since then return {0, tostring(since), r[10] or ''} end
elseif not (ARGV[8] == r[4] and tick <= since) then
  return {4, r[3] or ''}
end
local dest = KEYS[tonumber(ARGV[9])]
local enqueued = tonumber(r[8]) or 0
local limit = tonumber(ARGV[10])

-- ended(id): the task `id` is over: it has no record (untracked, or gone after its retention),
-- or its record is final.
local function ended(id)
  local state = state_of(KEYS[1] .. ':task:' .. id)
  return not state or FINAL[state]
end

local function backlog()
  return redis.call('XLEN', KEYS[1]) + redis.call('XLEN', KEYS[3]) + redis.call('XLEN', KEYS[4]) +
         redis.call('ZCARD', KEYS[5])
end

-- add(): the gate, then the task; its record when tracked, and the tick in the ticks set.
-- Returns the entry id, or nil and the backlog when the queue is full.
local function add()
  local max_len = tonumber(ARGV[6])
  local id
  if ARGV[5] == 'reject' then
    local len = backlog()
    if len >= max_len then return nil, len end
    id = redis.call('XADD', dest, '*', unpack(ARGV, 13))
  else
    id = redis.call('XADD', dest, 'MAXLEN', '~', max_len, '*', unpack(ARGV, 13))
  end
  record_new(KEYS[1], ARGV, 13, nil, 'queued', 0)
  redis.call('ZADD', KEYS[6], tick, ARGV[2])
  redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -TICKS_KEEP - 1)
  return id
end

-- ran(): a tick of the schedule itself was enqueued: counted (limit) and remembered (overlap).
local function ran()
  redis.call('HSET', KEYS[2], 'running_id', ARGV[7])
  return redis.call('HINCRBY', KEYS[2], 'enqueued', 1)
end

if mode == 'backfill' then
  if redis.call('ZSCORE', KEYS[6], ARGV[2]) then return {0, ARGV[2], ''} end
  local id, len = add()
  if not id then return {3, len} end
  return {1, id, enqueued}
end

if r[6] == '1' then return {5, ''} end

-- A tick a backfill enqueued already (it may have run ahead of a tick's jitter) is taken.
if redis.call('ZSCORE', KEYS[6], ARGV[2]) then return {0, ARGV[2], r[10] or ''} end

local floor = tonumber(r[7])
if mode == 'release' then
  if r[10] ~= ARGV[2] then return {0, recorded_text or '', r[10] or ''} end
  local outcome_here = recorded_text == ARGV[2]  -- no newer tick was recorded since it was buffered
  -- Buffered before a pause: not caught up after the resume.
  if floor and tick <= floor then
    redis.call('HDEL', KEYS[2], 'buffered')
    if outcome_here then redis.call('HSET', KEYS[2], 'outcome', 'skipped') end
    return {0, r[7], ''}
  end
  if r[9] and not ended(r[9]) then return {8, r[9]} end
  redis.call('HDEL', KEYS[2], 'buffered')
  if limit and enqueued >= limit then
    if outcome_here then redis.call('HSET', KEYS[2], 'outcome', 'skipped') end
    return {6, 'limit'}
  end
  local id, len = add()
  if not id then
    if outcome_here then redis.call('HSET', KEYS[2], 'outcome', 'refused') end
    return {3, len}
  end
  if outcome_here then redis.call('HSET', KEYS[2], 'outcome', 'enqueued') end
  return {1, id, ran()}
end

if floor and tick <= floor then return {0, r[7], r[10] or ''} end
local recorded = tonumber(recorded_text)
if recorded and recorded >= tick then return {0, recorded_text, r[10] or ''} end
if limit and enqueued >= limit then return {6, 'limit'} end

local function record(outcome, through)
  redis.call('HSET', KEYS[2], 'tick', through or ARGV[2], 'outcome', outcome, 'task_id', ARGV[7])
end

if ARGV[3] == '1' and (ARGV[4] == 'skip' or not recorded) then
  if recorded then
    record('skipped')
    return {2, 'missed'}
  end
  -- A first start: the older ticks of the caller's batch (MissedTicks::all_within) are its
  -- past too; recording through the newest late one makes every instance find them taken.
  record('skipped', tostring(math.max(tick, tonumber(ARGV[12]) or tick)))
  return {2, 'first'}
end

if ARGV[11] ~= 'allow' and r[9] and not ended(r[9]) then
  if ARGV[11] == 'buffer_one' and not r[10] then
    record('buffered')
    redis.call('HSET', KEYS[2], 'buffered', ARGV[2])
    return {7, ''}
  end
  record('skipped')
  return {2, 'overlap'}
end

local id, len = add()
if not id then
  record('refused')
  return {3, len}
end
record('enqueued')
return {1, id, ran()}
