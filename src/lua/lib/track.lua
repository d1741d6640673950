-- lib/track.lua: the state record and the events of a tracked task (EnqueueOptions::retention).
-- A task is tracked when its fields hold `retention` ("<done ms> <dead ms>": how long its
-- record stays once done, or dead; -1 = for as long as its dead letter). Its record is the hash
-- <queue>:task:<task_id> (queue = the queue's stream, so it shares the queue's hash tag):
--   state        queued | delayed | running | retrying | done | dead | cancelled
--   type         task_type
--   attempts     handler starts so far
--   enqueued_at, started_at, finished_at   ms since the Unix epoch, the server's clock
--   worker       the consumer that started it last
--   error, reason   the last failure's error; a dead task's reason
--   result       what the handler returned (or wrote while it ran)
--   progress     what it reported last (Task::set_progress)
--   done_ms, dead_ms   the retention, as the task carries it
-- and every change of state is an entry of the capped stream <queue>:events (event, task_id,
-- at, and per event: attempts, error, reason, result, progress). Both are written by the
-- script that decides the change, so the record never disagrees with where the task is.
-- The keys are built here from the queue's name (they are not among the scripts' KEYS): they
-- share the queue's hash tag, so they are in the script's slot. A script including this file
-- includes lib/clock.lua before it.

local EVENTS_MAX = '10000' -- <queue>:events keeps about this many (XADD MAXLEN ~)
local WAITED_KEEP = 60000 -- ms a record someone waits on (watch.lua) stays after the end, at least
local FINAL = {done = true, dead = true, cancelled = true}

-- state_of(key): the record's state (false when there is none), or nil when `key` holds
-- another type than a hash (another program's key under a record's name): tracking then leaves
-- it alone rather than fail the script half-way (Redis does not undo what a script wrote before
-- an error: a retry copy would stay without its original's ack).
local function state_of(key)
  local state = redis.pcall('HGET', key, 'state')
  if type(state) == 'table' and state.err then return nil end
  return state
end

-- tracked(fields, first, last): the task's id and its retention (done ms, dead ms, as numbers,
-- then as the texts they were) when the fields fields[first], fields[first + 1], ... up to
-- fields[last] (name, value pairs; last defaults to the end) hold both; else nil. (Numbers
-- handed to redis.call are formatted with printf's %.17g, a tenth of a tracking script's time:
-- the records take the texts.)
local function tracked(fields, first, last)
  local id, retention = nil, nil
  for i = first, (last or #fields) - 1, 2 do
    if fields[i] == 'task_id' then
      id = fields[i + 1]
    elseif fields[i] == 'retention' then
      retention = fields[i + 1]
    end
  end
  if not id or not retention then return nil end
  local done_ms, dead_ms = string.match(retention, '^(%-?%d+) (%-?%d+)$')
  if not done_ms then return nil end
  return id, tonumber(done_ms), tonumber(dead_ms), done_ms, dead_ms
end

-- ms_text(ms): a number of milliseconds as the text redis.call is given (see tracked).
local function ms_text(ms)
  return string.format('%d', ms)
end

-- field_value(fields, first, last, name): the value of field `name` among fields[first..last]
-- (last defaults to the end), or nil.
local function field_value(fields, first, last, name)
  for i = first, (last or #fields) - 1, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end

local function task_type_of(fields, first, last)
  return field_value(fields, first, last, 'task_type') or ''
end

-- task_settled(queue, id, key, fields, first, last, state): a tracked task reached its final
-- state: its flow's parent and its batch learn it. Defined at the end of this file, with the
-- flows and batches (which call track_state in turn).
local task_settled

-- track_event(queue, event, id, now, pairs): one entry of <queue>:events.
local function track_event(queue, event, id, now, pairs)
  local args = {queue .. ':events', 'MAXLEN', '~', EVENTS_MAX, '*', 'event', event, 'task_id', id, 'at', now}
  for _, v in ipairs(pairs or {}) do args[#args + 1] = v end
  redis.pcall('XADD', unpack(args))  -- (a key of another type there: no event, nothing else lost)
end

-- track_ttl(key, ms): the record stays `ms` more (0: it goes now; < 0: it stays).
local function track_ttl(key, ms)
  if ms == 0 then
    redis.call('DEL', key)
  elseif ms > 0 then
    redis.call('PEXPIRE', key, ms_text(ms))
  else
    redis.call('PERSIST', key)
  end
end

-- track_new(queue, fields, first, last, state, due, now): a task enters the queue (enqueue,
-- replay): its record starts afresh, as `state` (queued or delayed, due at `due` ms), and an
-- 'enqueued' event says so. `now` (ms, default: the server's clock) is the reading its due time
-- was computed from, so that due_at is enqueued_at plus the delay.
-- A record of the same task id that is not final (a task enqueued again under its id while
-- the first still runs) keeps its attempts.
local function track_new(queue, fields, first, last, state, due, now)
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
  track_event(queue, 'enqueued', id, now, {'state', state})
end

-- track_start(queue, fields, first, last, worker, now, run): a handler starts a tracked task
-- (the caller checked that `worker` holds its entry): its record says running, by which worker,
-- from when (`now`: ms_text of the server's clock), and counts the attempt; a 'started' event
-- says so. What an earlier attempt reported (progress, a partial result) is cleared: the result
-- is this attempt's. `run` names the attempt ("<entry id> <delivery count>", kept in the
-- record's `run`): the same start sent again (its reply was lost) writes nothing twice.
-- Returns the attempt's number, or 0 when nothing was written (not tracked, or the record is
-- final: a stale start must not undo what a newer owner wrote).
local function track_start(queue, fields, first, last, worker, now, run)
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
  track_event(queue, 'started', id, now, {'attempt', ms_text(attempt), 'worker', worker})
  return attempt
end

-- track_due(queue, fields, first): a delayed task went to its stream (due, or run now): its
-- record says queued, unless it waits as a retry (it stays retrying until it starts).
local function track_due(queue, fields, first)
  local id = tracked(fields, first)
  if not id then return end
  local key = queue .. ':task:' .. id
  if state_of(key) == 'delayed' then redis.call('HSET', key, 'state', 'queued') end
end

-- track_state(queue, fields, first, state, event, pairs, kept, last, now): a tracked task moves
-- on: its record takes `state` and the field/value `pairs`, and `event` (when not nil) is
-- written with them; `kept` (pairs too) goes to the record only (a result: the events stay
-- small). A final state starts the record's retention and sets finished_at. The task's fields
-- end at fields[last] (default: the end); `now` defaults to the server's clock. Returns the
-- record's key (nil: not tracked; queue '' is never tracked).
local function track_state(queue, fields, first, state, event, pairs, kept, last, now)
  if not queue or queue == '' then return nil end
  local id, done_ms, dead_ms, done_text, dead_text = tracked(fields, first, last)
  if not id then return nil end
  local key = queue .. ':task:' .. id
  local old = state_of(key)
  if old == nil then return nil end
  now = now or ms_text(now_ms())
  local args = {'HSET', key, 'state', state, 'type', task_type_of(fields, first, last), 'done_ms', done_text,
                'dead_ms', dead_text}
  if FINAL[state] then
    args[#args + 1] = 'finished_at'
    args[#args + 1] = now
  end
  for _, v in ipairs(pairs or {}) do args[#args + 1] = v end
  for _, v in ipairs(kept or {}) do args[#args + 1] = v end
  redis.call(unpack(args))
  if event then track_event(queue, event, id, now, pairs) end
  local keep = done_ms
  if state == 'dead' then keep = dead_ms end
  -- A record someone waits on outlives a retention of 0 for a while: the waiter reads it.
  if FINAL[state] and keep == 0 and redis.call('HEXISTS', key, 'waited') == 1 then keep = WAITED_KEEP end
  -- Only the first final state counts for a flow: a stale holder's later write does not.
  if FINAL[state] and not (old and FINAL[old]) then task_settled(queue, id, key, fields, first, last, state) end
  if FINAL[state] then track_ttl(key, keep) end
  return key
end

-- Flows (Producer::enqueue_flow). A parent task waits, unrun, until every child finished; its
-- record says `waiting`. The flow of parent P is kept in P's queue (so in P's slot):
--   <queue>:flow:P           hash: body (P's stream, then its fields: a MessagePack array,
--                            written by enqueue.lua), order (its children's ids as enqueued, packed)
--   <queue>:flow:P:pending   set: the children not finished yet
--   <queue>:flow:P:results   hash: per finished child, 'd' .. its result (done), or 'x' .. its
--                            state .. ' ' .. its error (a failure that does not fail P)
-- A child carries flow_parent (P) and flow_on_failure: 'fail' (P ends dead, reason
-- child_failed; the child stays pending, so its replay resumes the flow), 'ignore' (P runs, and
-- reads the failure) or 'remove' (P runs without it). Every change is made by the script that
-- writes the child's final state, and only while the child is pending: the script whose SREM
-- leaves the set empty enqueues P, and the body, deleted then, is enqueued once.

-- flow_children(flow): the finished children, in the order enqueued, as P's `flow_children`
-- field: per child `<length>:<id><length>:<outcome>` (outcome as in the results hash).
local function flow_children(flow)
  local order = cmsgpack.unpack(redis.call('HGET', flow, 'order') or cmsgpack.pack({}))
  local results = redis.call('HGETALL', flow .. ':results')
  local by_id = {}
  for i = 1, #results, 2 do by_id[results[i]] = results[i + 1] end
  local parts = {}
  for _, id in ipairs(order) do
    local r = by_id[id]
    if r then parts[#parts + 1] = #id .. ':' .. id .. #r .. ':' .. r end
  end
  return table.concat(parts)
end

-- flow_release(queue, parent): the last child of `parent` finished: the parent goes to its
-- stream with its children's outcomes, its record says queued, and its flow's keys go. A group
-- (its task_type GROUP_TYPE, see group() in streamq/producer.hpp) is not run: its record says
-- done at once, its children's outcomes its result. Nothing when the body is gone (released
-- already) or the parent was cancelled meanwhile.
local GROUP_TYPE = 'streamq:group'
local function flow_release(queue, parent)
  local flow = queue .. ':flow:' .. parent
  local body = redis.call('HGET', flow, 'body')
  if not body then return end
  local key = queue .. ':task:' .. parent
  local parts = nil
  local children = nil
  if state_of(key) ~= 'cancelled' then
    parts = cmsgpack.unpack(body)
    children = flow_children(flow)
  end
  redis.call('DEL', flow, flow .. ':pending', flow .. ':results')
  if not parts then return end
  redis.pcall('HDEL', key, 'error', 'reason', 'finished_at')
  redis.pcall('PERSIST', key)
  if field_value(parts, 2, #parts, 'task_type') == GROUP_TYPE then
    -- (A group that ended dead and resumes goes through waiting: its end is then a first
    -- final state again, which its own parent learns.)
    redis.pcall('HSET', key, 'state', 'waiting')
    track_state(queue, parts, 2, 'done', 'done', nil, {'result', children})
    return
  end
  parts[#parts + 1] = 'flow_children'
  parts[#parts + 1] = children
  redis.call('XADD', parts[1], '*', unpack(parts, 2))
  track_state(queue, parts, 2, 'queued', 'released')
end

-- flow_keep(queue, parent): the flow of a parent that ended dead lives as long as its record:
-- its keys take the record's TTL, or go with it (a retention of 0, or expired).
local function flow_keep(queue, parent)
  local flow = queue .. ':flow:' .. parent
  local ttl = redis.call('PTTL', queue .. ':task:' .. parent)
  if ttl == -2 then
    redis.call('DEL', flow, flow .. ':pending', flow .. ':results')
  elseif ttl > 0 then
    for _, k in ipairs({flow, flow .. ':pending', flow .. ':results'}) do redis.call('PEXPIRE', k, ttl) end
  end
end

-- flow_fail(queue, parent, child, err): a child whose failure fails its parent: the waiting
-- parent ends dead (reason child_failed), which its own parent learns in turn, and its flow's
-- keys live as long as its record (flow_keep). The body stays: a replayed child that succeeds
-- resumes it. (A unique parent keeps its lock, to expire on its own: the flow may resume.)
local function flow_fail(queue, parent, child, err)
  local key = queue .. ':task:' .. parent
  if state_of(key) ~= 'waiting' then return end
  local flow = queue .. ':flow:' .. parent
  local body = redis.call('HGET', flow, 'body')
  if not body then return end
  local parts = cmsgpack.unpack(body)
  track_state(queue, parts, 2, 'dead', 'dead', {'error', 'child ' .. child .. ' failed: ' .. err, 'reason',
                                                 'child_failed'})
  flow_keep(queue, parent)
end

-- flow_child_ended(queue, parent, id, state, policy, result, err): child `id` of `parent` (in
-- this queue) ended `state` (done, dead or cancelled) for the first time, with its result
-- (done) or error: applied once, while the child is pending (a stale or repeated word of the
-- same end finds it gone, and changes nothing).
local function flow_child_ended(queue, parent, id, state, policy, result, err)
  local flow = queue .. ':flow:' .. parent
  local pending = flow .. ':pending'
  if redis.call('SISMEMBER', pending, id) == 0 then return end
  if state == 'done' then
    redis.call('HSET', flow .. ':results', id, 'd' .. result)
  elseif policy == 'ignore' then
    redis.call('HSET', flow .. ':results', id, 'x' .. state .. ' ' .. err)
  elseif policy ~= 'remove' then
    if state_of(queue .. ':task:' .. parent) == 'waiting' then
      track_event(queue, 'child_ended', parent, ms_text(now_ms()),
                  {'child', id, 'state', state, 'pending', tostring(redis.call('SCARD', pending))})
    end
    flow_fail(queue, parent, id, err)
    return
  end
  redis.call('SREM', pending, id)
  local left = redis.call('SCARD', pending)
  track_event(queue, 'child_ended', parent, ms_text(now_ms()), {'child', id, 'state', state, 'pending', tostring(left)})
  if left == 0 then
    flow_release(queue, parent)
  elseif state_of(queue .. ':task:' .. parent) == 'dead' then
    flow_keep(queue, parent)  -- (a key written now, the results hash, lives no longer than the rest)
  end
end

-- Flows across partitions (Producer::enqueue_flow on a partitioned queue): every parent lives
-- in the root's partition (its "home"), a child without children in its own. Such a child
-- carries flow_home (the home's stream). Its end cannot be applied by its own script (another
-- slot, on Cluster another master): it is recorded in its partition's outbox, the stream
-- <queue>:flows:outbox, and the consumers' courier (src/consumer/flow_courier.cpp) carries it
-- home with flow_apply.lua (which calls flow_child_ended), then deletes it: carried at least
-- once, applied once. The home's placements of such children go the other way
-- (<queue>:flows:placing, see enqueue.lua).
local function flow_settled(queue, id, key, fields, first, last, state)
  local parent = field_value(fields, first, last, 'flow_parent')
  if not parent then return end
  local home = field_value(fields, first, last, 'flow_home')
  if home == queue then home = nil end
  if not home and redis.call('SISMEMBER', queue .. ':flow:' .. parent .. ':pending', id) == 0 then return end
  local outcome = redis.call('HMGET', key, 'result', 'error', 'reason')
  local policy = field_value(fields, first, last, 'flow_on_failure') or 'fail'
  local err = state
  if state == 'dead' then err = outcome[2] or outcome[3] or state end
  if home then
    redis.call('XADD', queue .. ':flows:outbox', '*', 'kind', 'settle', 'to', home, 'parent', parent, 'child', id,
               'state', state, 'policy', policy, 'result', outcome[1] or '', 'error', err)
  else
    flow_child_ended(queue, parent, id, state, policy, outcome[1] or '', err)
  end
end

-- Batches (Producer::open_batch). Batch B of a queue is kept in the queue's slot:
--   <queue>:batches:B          hash: state (open, closed, fired), total, done, failed (its
--                              members so far, and how many ended each way), on_complete and
--                              on_success (a callback's stream and fields, packed as a flow's body),
--                              parent (the batch B is a member of, if any)
--   <queue>:batches:B:pending  set: its members not finished: task ids, and 'batch:' .. id for a
--                              nested batch
-- A task of B carries batch_id (B). A member's end is counted once (its SREM); the script that
-- leaves a closed batch with nothing pending fires it (state fired, only from closed): its
-- on_complete is enqueued, and its on_success when no member failed; a nested batch then ends
-- as a member of its parent (done when none of its members failed). A fired batch's counts
-- stay BATCH_KEEP ms.
local BATCH_KEEP = 86400000
local batch_member_ended

-- batch_fire(queue, batch): the closed batch has nothing pending: its callbacks go.
local function batch_fire(queue, batch)
  local key = queue .. ':batches:' .. batch
  local b = redis.call('HMGET', key, 'state', 'failed', 'on_complete', 'on_success', 'parent')
  if b[1] ~= 'closed' then return end
  redis.call('HSET', key, 'state', 'fired')
  local failed = tonumber(b[2]) or 0
  for _, packed in ipairs({b[3] or '', failed == 0 and b[4] or ''}) do
    if packed ~= '' then
      local parts = cmsgpack.unpack(packed)
      redis.call('XADD', parts[1], '*', unpack(parts, 2))
      track_new(queue, parts, 2, #parts, 'queued', 0)
    end
  end
  redis.call('PEXPIRE', key, BATCH_KEEP)  -- (its pending set is empty: Redis deleted it)
  if b[5] then batch_member_ended(queue, b[5], 'batch:' .. batch, failed == 0) end
end

-- batch_member_ended(queue, batch, member, ok): a member of `batch` ended (ok: done), once.
batch_member_ended = function(queue, batch, member, ok)
  local key = queue .. ':batches:' .. batch
  if redis.call('SREM', key .. ':pending', member) == 0 then return end
  redis.call('HINCRBY', key, ok and 'done' or 'failed', 1)
  if redis.call('SCARD', key .. ':pending') == 0 then batch_fire(queue, batch) end
end

task_settled = function(queue, id, key, fields, first, last, state)
  flow_settled(queue, id, key, fields, first, last, state)
  local batch = field_value(fields, first, last, 'batch_id')
  if batch then batch_member_ended(queue, batch, id, state == 'done') end
end
