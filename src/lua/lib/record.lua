-- lib/record.lua: the record of a tracked task (EnqueueOptions::retention), from its enqueue to
-- its start; its end is lib/settle.lua's. A task is tracked when its fields hold `retention`
-- ("<done ms> <dead ms>": how long its record stays once done, or dead; -1 = for as long as its
-- dead letter). Its record is the hash <queue>:task:<task_id> (queue = the queue's stream, so it
-- shares the queue's hash tag and is in the script's slot; the keys are built here, not passed
-- among KEYS):
--   state        queued | delayed | waiting | running | retrying | done | dead | cancelled
--   type         task_type
--   attempts     handler starts so far
--   enqueued_at, started_at, finished_at, due_at   ms since the Unix epoch, the server's clock
--   worker, run  the consumer that started it last, and that start's "<entry id> <deliveries>"
--   error, reason   the last failure's error; a dead task's reason
--   result, progress   what the handler returned (or wrote while it ran); what it reported last
--   done_ms, dead_ms   the retention, as the task carries it
--   waited       someone waits on it (watch.lua): it outlives a retention of 0 by WAITED_KEEP
--   flow_parent, flow_home, flow_children, flow_queues   its place in a flow (lib/flows.lua)
-- Every change of state is also an event (lib/events.lua), written by the script that decides
-- the change, so the record never disagrees with where the task is. A script including this
-- file includes lib/clock.lua, lib/fields.lua and lib/events.lua before it.
-- Input: a task's fields are fields[first], fields[first + 1], ... up to fields[last] (name,
--   value pairs; last defaults to the end of `fields`).

local WAITED_KEEP = 60000 -- ms a record someone waits on (watch.lua) stays after the end, at least
local FINAL = {done = true, dead = true, cancelled = true}

local function task_type_of(fields, first, last)
  return field_value(fields, first, last, 'task_type') or ''
end

-- tracked(fields, first, last): the task's id and its retention (done ms, dead ms, as numbers,
-- then as the texts they were) when its fields hold both; else nil.
local function tracked(fields, first, last)
  local id, retention = field_pair(fields, first, last, 'task_id', 'retention')
  if not id or not retention then return nil end
  local done_ms, dead_ms = string.match(retention, '^(%-?%d+) (%-?%d+)$')
  if not done_ms then return nil end
  return id, tonumber(done_ms), tonumber(dead_ms), done_ms, dead_ms
end

-- state_of(key): the record's state (false when there is none), or nil when `key` holds
-- another type than a hash (another program's key under a record's name): tracking then leaves
-- it alone rather than fail the script half-way (Redis does not undo what a script wrote before
-- an error: a retry copy would stay without its original's ack).
local function state_of(key)
  local state = redis.pcall('HGET', key, 'state')
  if type(state) == 'table' and state.err then return nil end
  return state
end

-- record_ttl(key, ms): the record stays `ms` more (0: it goes now; < 0: it stays).
local function record_ttl(key, ms)
  if ms == 0 then
    redis.call('DEL', key)
  elseif ms > 0 then
    redis.call('PEXPIRE', key, ms_text(ms))
  else
    redis.call('PERSIST', key)
  end
end

-- record_new(queue, fields, first, last, state, due, now): a task enters the queue (enqueue,
-- replay, a batch's callback): its record starts afresh, as `state` (queued, delayed or
-- waiting, due at `due` ms), and an 'enqueued' event says so. `now` (ms, default: the server's
-- clock) is the reading its due time was computed from, so that due_at is enqueued_at plus the
-- delay. A record of the same task id that is not final (a task enqueued again under its id
-- while the first still runs) keeps its attempts.
local function record_new(queue, fields, first, last, state, due, now)
  local id, _, _, done_ms, dead_ms = tracked(fields, first, last)
  if not id then return end
  local key = queue .. ':task:' .. id
  local old = state_of(key)
  if old == nil then return end
  now = ms_text(now or now_ms())
  if old and FINAL[old] then
    -- A finished task's id enqueued again: a new task, a fresh record. (HDEL, not DEL: the
    -- producer's ACL role gets no command that could delete a stream.)
    redis.call('HDEL', key, 'started_at', 'finished_at', 'due_at', 'worker', 'error', 'reason', 'result',
               'progress', 'waited', 'run')
    redis.call('HSET', key, 'attempts', 0)
    -- Its links in a flow (Inspector::flow) stay for a replay of the same task (its fields say
    -- so: a child's flow_parent, a released parent's flow_children), not for a new one.
    if not field_value(fields, first, last, 'flow_parent') then redis.call('HDEL', key, 'flow_parent') end
    if not field_value(fields, first, last, 'flow_home') then redis.call('HDEL', key, 'flow_home') end
    if not field_value(fields, first, last, 'flow_children') then
      redis.call('HDEL', key, 'flow_children', 'flow_queues')
    end
  end
  local parent = field_value(fields, first, last, 'flow_parent')
  if parent then redis.call('HSET', key, 'flow_parent', parent) end
  -- (A child in another partition or queue than its parent: where the parent is, for the
  -- Inspector and the dashboard.)
  local home = field_value(fields, first, last, 'flow_home')
  if home then redis.call('HSET', key, 'flow_home', home) end
  redis.call('HSET', key, 'state', state, 'type', task_type_of(fields, first, last), 'enqueued_at', now,
             'done_ms', done_ms, 'dead_ms', dead_ms)
  redis.call('HSETNX', key, 'attempts', 0)
  if due and due > 0 then redis.call('HSET', key, 'due_at', ms_text(due)) end
  redis.call('PERSIST', key)
  event_add(queue, 'enqueued', id, now, 'state', state)
end

-- record_start(queue, fields, first, last, worker, now, run): a handler starts a tracked task
-- (the caller checked that `worker` holds its entry): its record says running, by which worker,
-- from when (`now`: ms text of the server's clock), and counts the attempt; a 'started' event
-- says so. What an earlier attempt reported (progress, a partial result) is cleared: the result
-- is this attempt's. `run` names the attempt ("<entry id> <delivery count>"): the same start
-- sent again (its reply was lost) writes nothing twice. Returns the attempt's number, or 0 when
-- nothing was written (not tracked, or the record is final: a stale start must not undo what a
-- newer owner wrote). (A start written with its task's end, in one call, is lib/settle.lua's.)
local function record_start(queue, fields, first, last, worker, now, run)
  local id, _, _, done_ms, dead_ms = tracked(fields, first, last)
  if not id then return 0 end
  local key = queue .. ':task:' .. id
  local record = redis.pcall('HMGET', key, 'state', 'worker', 'run', 'attempts')
  if record.err then return 0 end  -- a key of another type: left alone (see state_of)
  local state = record[1]
  if state and FINAL[state] then return 0 end
  if state == 'running' and record[2] == worker and record[3] == run then return tonumber(record[4]) or 0 end
  redis.call('HDEL', key, 'result', 'progress')
  redis.call('HSET', key, 'state', 'running', 'started_at', now, 'worker', worker, 'run', run, 'type',
             task_type_of(fields, first, last), 'done_ms', done_ms, 'dead_ms', dead_ms)
  local attempt = redis.call('HINCRBY', key, 'attempts', 1)
  redis.call('PERSIST', key)
  event_add(queue, 'started', id, now, 'attempt', ms_text(attempt), 'worker', worker)
  return attempt
end

-- record_due(queue, fields, first): a delayed task went to its stream (due, or run now): its
-- record says queued, unless it waits as a retry (it stays retrying until it starts).
local function record_due(queue, fields, first)
  local id = tracked(fields, first)
  if not id then return end
  local key = queue .. ':task:' .. id
  if state_of(key) == 'delayed' then redis.call('HSET', key, 'state', 'queued') end
end
