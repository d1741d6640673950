-- report: a running tracked task reports its progress, or a partial result (Task::set_progress,
-- Task::write_partial_result).
-- KEYS[1] = the task's record (<queue>:task:<task_id>)
-- ARGV[1] = queue (the queue's stream), ARGV[2] = 'progress' | 'result', ARGV[3] = the value,
--           ARGV[4] = the task id, ARGV[5] = the reporting consumer, ARGV[6] = its attempt's
--           number (what running.lua returned)
-- Returns 1, or 0 when the record does not say running, or says so of another attempt or
-- another worker (a stale holder: its entry was taken over and started again): nothing is
-- written then.
-- One script: the check, the record and (for progress) the event go together.
-- @include lib/clock.lua
-- @include lib/track.lua
local now = redis.call('HMGET', KEYS[1], 'state', 'worker', 'attempts')
if now[1] ~= 'running' or now[2] ~= ARGV[5] or now[3] ~= ARGV[6] then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
if ARGV[2] == 'progress' then track_event(ARGV[1], 'progress', ARGV[4], now_ms(), {'progress', ARGV[3]}) end
return 1
