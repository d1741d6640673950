-- report: a running tracked task reports its progress, or a partial result (Task::set_progress,
-- Task::write_partial_result).
-- KEYS[1] = the task's record (<queue>:task:<task_id>)
-- ARGV[1] = queue (the queue's stream), ARGV[2] = 'progress' | 'result', ARGV[3] = the value,
--           ARGV[4] = the task id
-- Returns 1, or 0 when the record does not say running (it finished, or was never made):
-- nothing is written then.
-- One script: the check, the record and (for progress) the event go together.
-- @include lib/clock.lua
-- @include lib/track.lua
if redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
if ARGV[2] == 'progress' then track_event(ARGV[1], 'progress', ARGV[4], now_ms(), {'progress', ARGV[3]}) end
return 1
