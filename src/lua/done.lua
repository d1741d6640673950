-- done: tracked tasks succeeded (their fields hold `retention`, lib/track.lua), or running
-- tasks were cancelled by an operator (tracked or not): each entry is acknowledged and
-- deleted, and its record says done (or cancelled). The completer sends many in one call.
-- KEYS[1] = stream (the entries' priority level), KEYS[2] = dead-letter stream
-- ARGV[1] = group, ARGV[2] = queue (the queue's stream: the records' and the unique locks'
--           prefix), ARGV[3] = consumer, ARGV[4] = n, then per entry:
--   entry id;
--   'done' or 'cancelled' (the entry's cancel request, <stream>:cancel:<id>, is deleted then);
--   '1' when its start is to be written first, as running.lua writes it (a mark the completer
--       had not sent yet), else '0';
--   '1' when the next string is the task's result ('0': the record keeps what the handler
--       wrote while it ran, if anything), the result;
--   the id of the entry's provisional dead-letter record ('' when its body was not lost, see
--       orphan.lua);
--   the unique lock (<queue>:unique:<key>, '' for none);
--   m, then the m strings of the task's fields (task_id, task_type, and retention when tracked;
--   flow_parent and flow_on_failure for a flow's child, with flow_home when its parent is in
--   another partition, batch_id for a batch's task).
-- Returns per entry 1 when its record says done (or cancelled); 0 when the entry was no longer
-- pending and had no provisional record, so this success was not its fate to write (its lease
-- was lost and the new owner retried it meanwhile: the record says what it did). Each entry is
-- checked on its own.
-- One script: each entry's ack, record and events stand or fall together (as the MULTI of an
-- untracked success does for the ack alone). The record is written after the ack, not instead
-- of it: a success is always acknowledged (see docs/delivery.md, "What happens when": a stale
-- worker). A start written here (its mark had not been sent alone) goes with the entry's ack:
-- written when the ack acknowledged the entry (this consumer held it, or had until a new owner
-- took it over: the success stands then, see above, and so does the attempt that made it), and
-- its 'started' event precedes the 'done'.
-- @include lib/clock.lua
-- @include lib/track.lua
local group, queue, me = ARGV[1], ARGV[2], ARGV[3]
local out, now, i = {}, ms_text(now_ms()), 5
local acked_ids = {}

-- started_and_finished(first, last, fate, result): a tracked task's start and its end written
-- together, as running.lua and then track_state would have written them, in fewer calls (this
-- is the common path of short tasks): one HMGET, one HSET, the 'started' event, then the 'done'
-- (or 'cancelled') event, and the retention. The start is skipped when the record is final
-- already (an operator's cancel, say).
local function started_and_finished(first, last, fate, result)
  local id, done_ms, _, done_text, dead_text = tracked(ARGV, first, last)
  if not id then return end
  local key = queue .. ':task:' .. id
  local record = redis.pcall('HMGET', key, 'state', 'attempts', 'waited')
  if record.err then return end  -- a key of another type: left alone (see state_of)
  local start = not (record[1] and FINAL[record[1]])
  local attempt = (tonumber(record[2]) or 0) + 1
  if start and attempt > 1 then redis.call('HDEL', key, 'result', 'progress') end
  local args = {'HSET', key, 'state', fate, 'finished_at', now}
  if not record[1] then
    -- No record (its enqueue did not write one): it is made whole here, as track_state would.
    for _, v in ipairs({'type', task_type_of(ARGV, first, last), 'done_ms', done_text, 'dead_ms', dead_text}) do
      args[#args + 1] = v
    end
  end
  if start then
    for _, v in ipairs({'started_at', now, 'worker', me, 'attempts', ms_text(attempt)}) do args[#args + 1] = v end
  end
  if result then
    args[#args + 1] = 'result'
    args[#args + 1] = result
  end
  redis.call(unpack(args))
  if start then track_event(queue, 'started', id, now, {'attempt', ms_text(attempt), 'worker', me}) end
  track_event(queue, fate, id, now)
  -- (A record final already: only the first final state counts for a flow, as in track_state.)
  if start then task_settled(queue, id, key, ARGV, first, last, fate) end
  local keep = done_ms
  if keep == 0 and record[3] then keep = WAITED_KEEP end
  track_ttl(key, keep)
end

for e = 1, tonumber(ARGV[4]) do
  local entry, fate, start, has_result, result = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local orphan_id, lock = ARGV[i + 5], ARGV[i + 6]
  local first, last = i + 8, i + 7 + tonumber(ARGV[i + 7])
  i = last + 1
  local acked = redis.call('XACK', KEYS[1], group, entry)
  acked_ids[#acked_ids + 1] = entry
  local provisional = orphan_id ~= ''
  if provisional then
    redis.call('XDEL', KEYS[2], orphan_id)
    redis.call('DEL', KEYS[1] .. ':orphan:' .. entry)
  end
  local task_id = nil
  if fate == 'cancelled' then redis.call('DEL', KEYS[1] .. ':cancel:' .. entry) end
  for f = first, last - 1, 2 do
    if ARGV[f] == 'task_id' then task_id = ARGV[f + 1] end
  end
  if lock ~= '' and task_id and redis.pcall('GET', lock) == task_id then redis.call('DEL', lock) end
  out[e] = 0
  if acked == 1 or provisional then
    if has_result ~= '1' then result = nil end
    if start == '1' and acked == 1 then
      started_and_finished(first, last, fate, result)
    else
      track_state(queue, ARGV, first, fate, fate, nil, result and {'result', result}, last, now)
    end
    out[e] = 1
  end
end
if #acked_ids > 0 then redis.call('XDEL', KEYS[1], unpack(acked_ids)) end
return out
