-- done: a tracked task succeeded (its fields hold `retention`, lib/track.lua), or a running
-- task was cancelled by an operator (tracked or not): its entry is acknowledged and deleted,
-- and its record says done (or cancelled), in one script.
-- KEYS[1] = stream (the entry's priority level), KEYS[2] = dead-letter stream
-- ARGV[1] = group, ARGV[2] = entry id, ARGV[3] = queue (the queue's stream: the record's and
--           the unique lock's prefix), ARGV[4] = '1' when ARGV[5] is the task's result ('0':
--           the record keeps what the handler wrote while it ran, if anything), ARGV[5] = the
--           result, ARGV[6] = the id of the entry's provisional dead-letter record ('' when
--           its body was not lost, see orphan.lua), ARGV[7] = the unique lock
--           (<queue>:unique:<key>, '' for none), ARGV[8] = 'done' or 'cancelled' (the
--           entry's cancel request, <stream>:cancel:<id>, is deleted then), ARGV[9..] = the
--           task's fields (task_id, task_type, and retention when tracked).
-- Returns 1 when the record says done; 0 when the entry was no longer pending and had no
-- provisional record, so this success was not its fate to write (its lease was lost and the
-- new owner retried it meanwhile: the record says what it did).
-- One script: the ack, the record and the event stand or fall together (as the MULTI of an
-- untracked success does for the ack alone). The record is written after the ack, not
-- instead of it: a success is always acknowledged (see docs/delivery.md, "What happens when": a stale worker).
-- @include lib/clock.lua
-- @include lib/track.lua
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local provisional = ARGV[6] ~= ''
if provisional then
  redis.call('XDEL', KEYS[2], ARGV[6])
  redis.call('DEL', KEYS[1] .. ':orphan:' .. ARGV[2])
end
local task_id = nil
if ARGV[8] == 'cancelled' then redis.call('DEL', KEYS[1] .. ':cancel:' .. ARGV[2]) end
for i = 9, #ARGV - 1, 2 do
  if ARGV[i] == 'task_id' then task_id = ARGV[i + 1] end
end
if ARGV[7] ~= '' and task_id and redis.pcall('GET', ARGV[7]) == task_id then redis.call('DEL', ARGV[7]) end
if acked == 0 and not provisional then return 0 end
local kept = nil
if ARGV[4] == '1' then kept = {'result', ARGV[5]} end
track_state(ARGV[3], ARGV, 9, ARGV[8], ARGV[8], nil, kept)
return 1
