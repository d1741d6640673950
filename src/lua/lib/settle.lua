-- lib/settle.lua: the one path for the end of a task's attempt, and for every change of a
-- tracked task's state after its start: done, dead, cancelled (final), retrying, handed back,
-- delayed again, a waiting parent released. Every script that ends a task calls task_end; a
-- fast path is this same code with less to do (an untracked task has no record, a task in no
-- flow or batch settles neither). A script including this file includes lib/clock.lua,
-- lib/fields.lua, lib/tenants.lua, lib/events.lua, lib/record.lua, lib/unique.lua,
-- lib/flows.lua and lib/batches.lua before it.
-- Input: task_end(queue, fields, first, last, state, event, more):
--   queue   the queue's stream (the records' prefix); '' or nil: nothing is written (a
--           provisional dead letter, whose task still runs, see lib/fate.lua)
--   fields  the task's fields are fields[first..last] (name, value pairs; last: nil = the end)
--   state   its new state; event: the event's name (nil: none)
--   more    nil, or a table of: pairs (field/value pairs for the record and the event), result
--           (the record's result, not in the event), now (ms text; default the server's
--           clock), start (the worker whose start is written with this end, in the same call),
--           lock (its unique lock's key, when the caller knows it; else read from unique_key),
--           keep_lock (true: a final state that keeps the lock, a failed flow's parent),
--           waited (true: the task ended where it waited, in the delayed set or its tenant's
--           backlog, holding no slot: a running task of the same id keeps its own)
-- Output: the record's key (nil: not tracked). Steps, in order:
--   1. the record: the state and the pairs; with `start`, the start as record_start writes it;
--      a final state sets finished_at (a record missing is made whole);
--   2. the events: 'started' (with `start`), then `event`;
--   3. a tenant's task gives its tenant's slot back (lib/tenants.lua), whatever the state: the
--      attempt, if one ran, has ended (not when it `waited`);
--   4. a final state releases the unique lock, while it holds this task's id;
--   5. a first final state settles the flow's parent (lib/flows.lua)
--   6. and the batch (lib/batches.lua): only the first final state counts, so a stale holder's
--      later end settles nothing;
--   7. a final state starts the record's retention (last: a retention of 0 deletes the record,
--      which step 5 reads).

local NOTHING = {}

-- Step 1. Returns the record's key, the task id, `now`, the attempt started here (nil: none),
-- whether this is the task's first final state, and how long the record stays once final; nil
-- when the task is not tracked (or its key holds another type: left alone, see state_of).
local function end_record(queue, fields, first, last, state, more)
  local id, done_ms, dead_ms, done_text, dead_text = tracked(fields, first, last)
  if not id then return nil end
  local key = queue .. ':task:' .. id
  local record = redis.pcall('HMGET', key, 'state', 'attempts', 'waited')
  if record.err then return nil end
  local old, now, final = record[1], more.now or ms_text(now_ms()), FINAL[state]
  -- One HSET, its arguments in one table (no table per part: this runs for every task).
  local args, n = {'HSET', key, 'state', state}, 4
  if final then
    args[n + 1], args[n + 2], n = 'finished_at', now, n + 2
  end
  if not old then  -- no record (its enqueue did not write one): made whole
    args[n + 1], args[n + 2], args[n + 3], args[n + 4], args[n + 5], args[n + 6], n =
      'type', task_type_of(fields, first, last), 'done_ms', done_text, 'dead_ms', dead_text, n + 6
  end
  local attempt = nil
  if more.start and not (old and FINAL[old]) then
    attempt = ms_text((tonumber(record[2]) or 0) + 1)
    if record[2] and record[2] ~= '0' then redis.call('HDEL', key, 'result', 'progress') end
    args[n + 1], args[n + 2], args[n + 3], args[n + 4], args[n + 5], args[n + 6], n =
      'started_at', now, 'worker', more.start, 'attempts', attempt, n + 6
  end
  local pairs = more.pairs
  if pairs then
    for k = 1, #pairs do args[n + k] = pairs[k] end
    n = n + #pairs
  end
  if more.result then
    args[n + 1], args[n + 2], n = 'result', more.result, n + 2
  end
  redis.call(unpack(args, 1, n))
  local keep = state == 'dead' and dead_ms or done_ms
  if final and keep == 0 and record[3] then keep = WAITED_KEEP end
  return key, id, now, attempt, final and not (old and FINAL[old]), keep
end

-- Step 2.
local function end_events(queue, id, now, attempt, event, more)
  if attempt then event_add(queue, 'started', id, now, 'attempt', attempt, 'worker', more.start) end
  if event then event_add(queue, event, id, now, unpack(more.pairs or NOTHING)) end
end

-- Step 4.
local function end_unique(queue, fields, first, last, more)
  if more.keep_lock then return end
  if more.lock then
    unique_release_lock(more.lock, field_value(fields, first, last, 'task_id'))
  else
    unique_release(queue, fields, first, last)
  end
end

-- Step 6.
local function end_batch(queue, id, fields, first, last, state)
  local batch = field_value(fields, first, last, 'batch_id')
  if batch then batch_member_ended(queue, batch, id, state == 'done') end
end

task_end = function(queue, fields, first, last, state, event, more)
  if not queue or queue == '' then return nil end
  more = more or NOTHING
  local key, id, now, attempt, first_final, keep = end_record(queue, fields, first, last, state, more)
  if key then end_events(queue, id, now, attempt, event, more) end
  if not more.waited then tenant_released(queue, fields, first, last) end
  if not FINAL[state] then return key end
  end_unique(queue, fields, first, last, more)
  if not key then return nil end
  if first_final then
    flow_settled(queue, id, key, fields, first, last, state)
    end_batch(queue, id, fields, first, last, state)
  end
  record_ttl(key, keep)
  return key
end
