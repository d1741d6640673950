-- lib/debounce.lua: debounced enqueues (EnqueueOptions::debounce): a burst of calls under one
-- key collapses into one task, which waits in the delayed set until the burst's window ended.
-- The key's state is the hash <stream>:debounce:<key> (debounce_key() in keys.hpp):
--   id       the waiting task's id (for operators: the scripts read it from the member)
--   member   its member of the delayed set (lib/delayed.lua)
-- expiring at the task's due time. A cycle is alive while that member is still in the delayed
-- set: once the forwarder moved it to its stream (or an operator ran or cancelled it), or the
-- hash expired, the next call starts a new cycle, so a call never joins a task that has left.
-- A script including this file includes lib/clock.lua, lib/fields.lua, lib/delayed.lua,
-- lib/events.lua and lib/record.lua before it.
-- Input: debounce_enqueue(keys, delayed, key, dest, delay, window, mode, nonce, fields, first,
--   last, admit): keys = the queue's streams {normal, high, low}, delayed = its delayed set, key
--   = the state's key, dest = the KEYS index (1-3) of the task's stream in `keys`, delay and
--   window in ms, mode 'keep_first' or 'replace_latest', nonce for a new member, the task's
--   fields[first..last] (task_id first), admit() = nil when a new task may be added, else the
--   refusal to return (the queue's gate: a call absorbed into a waiting task adds nothing).
-- Output: the id of the task that will run (this call's when it started a cycle), or an error
--   reply: WRONGTYPE (the key holds another type), DEBOUNCETYPE (the waiting task has another
--   task type: a key names one kind of task), or admit()'s refusal.

local function debounce_enqueue(keys, delayed, key, dest, delay, window, mode, nonce, fields, first, last,
                                admit)
  local held = redis.pcall('HMGET', key, 'id', 'member')
  if held.err then
    return redis.error_reply('WRONGTYPE the debounce key ' .. key .. ' holds a value that is not a hash')
  end
  local now = now_ms()
  local due = now + window + delay
  local member = held[2]
  local parts = member and redis.call('ZSCORE', delayed, member) and delayed_parts(member)
  -- (The id from the member itself: the task that waits is the one that will run.)
  local id, theirs = nil, nil
  if parts then id, theirs = field_pair(parts, 4, #parts, 'task_id', 'task_type') end
  if id then
    local ours = field_value(fields, first, last, 'task_type')
    if theirs ~= ours then
      return redis.error_reply('DEBOUNCETYPE debounce key ' .. key .. ' holds waiting task ' .. id .. ' of type "' ..
                               tostring(theirs) .. '", not "' .. tostring(ours) .. '"')
    end
    if mode ~= 'replace_latest' then return id end
    -- The waiting task with this call's payload, due a window from now: everything else (its id,
    -- nonce, stream, options) stays the cycle's first call's.
    local payload = field_value(fields, first, last, 'payload')
    for i = 4, #parts - 1, 2 do
      if parts[i] == 'payload' then parts[i + 1] = payload end
    end
    local replaced = cmsgpack.pack(parts)
    redis.call('ZREM', delayed, member)
    redis.call('ZADD', delayed, ms_text(due), replaced)
    redis.call('HSET', key, 'member', replaced)
    redis.call('PEXPIRE', key, ms_text(window + delay))
    if tracked(parts, 4) then
      local record = keys[1] .. ':task:' .. id
      if state_of(record) == 'delayed' then redis.call('HSET', record, 'due_at', ms_text(due)) end
    end
    return id
  end
  local refusal = admit()
  if refusal then return refusal end
  id = fields[first + 1]
  member = delayed_member(nonce, keys[dest], fields, first, last)
  redis.call('ZADD', delayed, ms_text(due), member)
  -- (Over the state of a cycle whose task left the set, if any.)
  redis.call('HSET', key, 'id', id, 'member', member)
  redis.call('PEXPIRE', key, ms_text(window + delay))
  record_new(keys[1], fields, first, last, 'delayed', due, now)
  return id
end
