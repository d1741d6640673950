-- report: a running tracked task's reports, coalesced by its worker (Task::set_progress,
-- Task::write_partial_result): its progress, or a partial result, or both.
-- KEYS[1] = the task's record (<queue>:task:<task_id>), KEYS[2] = the stream of its entry,
-- KEYS[3] = the entry's orphan note (<KEYS[2]>:orphan:<entry id>, orphan.lua)
-- ARGV[1] = queue (the queue's stream), ARGV[2] = group, ARGV[3] = the reporting consumer,
-- ARGV[4] = its entry's id, ARGV[5] = the task id, ARGV[6] = '1' when ARGV[7] is a progress
-- to write, ARGV[8] = '1' when ARGV[9] is a partial result to write.
-- Returns 1, or 0 when nothing was written: the record does not say running, or says so of
-- another worker, or the entry is no longer this consumer's (a stale holder: its entry was
-- taken over, and maybe started again). An entry whose body was deleted while it ran left the
-- pending list with its orphan note (orphan.lua): its running handler still reports.
-- One script: the checks, the record and (for progress) the event go together.
-- @include lib/owner.lua
-- @include lib/clock.lua
-- @include lib/events.lua
local now = redis.call('HMGET', KEYS[1], 'state', 'worker')
if now[1] ~= 'running' or now[2] ~= ARGV[3] then return 0 end
if pending_owner(KEYS[2], ARGV[2], ARGV[4]) ~= ARGV[3] and redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'result', ARGV[9]) end
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'progress', ARGV[7])
  event_add(ARGV[1], 'progress', ARGV[5], ms_text(now_ms()), 'progress', ARGV[7])
end
return 1
