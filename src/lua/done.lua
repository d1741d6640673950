-- done: tracked tasks succeeded (their fields hold `retention`, lib/record.lua), or running
-- tasks were cancelled by an operator (tracked or not): each entry is acknowledged and deleted,
-- and ends through lib/settle.lua: its record done (or cancelled), its events, its unique lock,
-- its flow's parent and its batch. The completer sends many in one call.
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
-- Returns per entry 1 when it ended here; 0 when the entry was no longer pending and had no
-- provisional record, so this success was not its fate to write (its lease was lost and the new
-- owner retried it meanwhile: the record says what it did; its lock stays with that fate), and
-- 0 when its provisional record was made its fate while this holder was cut off (it is marked
-- settled, see lib/settled.lua: its parent and batch followed that end).
-- Each entry is checked on its own (an XACK each: their counts say which were pending, and a
-- batch where one entry lost its owner ends the others and leaves that one alone).
-- One script: each entry's ack, record and events stand or fall together (as the MULTI of an
-- untracked success does for the ack alone). The record is written after the ack, not instead
-- of it: a success is always acknowledged (see docs/delivery.md, "What happens when": a stale
-- worker). A start written here (its mark had not been sent alone) goes with the entry's ack:
-- written when the ack acknowledged the entry (this consumer held it, or had until a new owner
-- took it over: the success stands then, see above, and so does the attempt that made it), and
-- its 'started' event precedes the end's.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
-- @include lib/settled.lua
local group, queue, me = ARGV[1], ARGV[2], ARGV[3]
local out, i = {}, 5
local acked_ids = {}
local more = {now = ms_text(now_ms())}  -- one per entry in turn
for e = 1, tonumber(ARGV[4]) do
  local entry, fate, start, has_result, result = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local orphan_id, lock = ARGV[i + 5], ARGV[i + 6]
  local first, last = i + 8, i + 7 + tonumber(ARGV[i + 7])
  i = last + 1
  local acked = redis.call('XACK', KEYS[1], group, entry)
  acked_ids[#acked_ids + 1] = entry
  local provisional = orphan_id ~= ''
  if provisional then
    local note = KEYS[1] .. ':orphan:' .. entry
    if is_settled(note, orphan_id) then
      provisional = false  -- ended from its record while this holder was cut off: settled
    else
      redis.call('XDEL', KEYS[2], orphan_id)
      redis.call('DEL', note)
    end
  end
  if fate == 'cancelled' then redis.call('DEL', KEYS[1] .. ':cancel:' .. entry) end
  out[e] = 0
  if acked == 1 or provisional then
    more.result = has_result == '1' and result or nil
    more.start = start == '1' and acked == 1 and me or nil
    more.lock = lock ~= '' and lock or nil
    task_end(queue, ARGV, first, last, fate, fate, more)
    out[e] = 1
  end
end
if #acked_ids > 0 then redis.call('XDEL', KEYS[1], unpack(acked_ids)) end
return out
