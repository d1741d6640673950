-- running: a handler starts a tracked task (its fields hold `retention`, lib/track.lua): its
-- record says running, by which worker, from when, and counts the attempt; a 'started' event
-- says so. What an earlier attempt reported (progress, a partial result) is cleared: the
-- result is this attempt's.
-- KEYS[1] = stream (the entry's priority level)
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4] = queue (the queue's
--           stream), ARGV[5..] = the task's fields
-- Returns the attempt's number, or 0 when nothing was written: the entry is not this
-- consumer's (any more), or the record is final (a stale start must not undo what a newer
-- owner wrote).
-- One script: the owner check and the write must not interleave with a new owner's.
-- @include lib/owner.lua
-- @include lib/clock.lua
-- @include lib/track.lua
if pending_owner(KEYS[1], ARGV[1], ARGV[3]) ~= ARGV[2] then return 0 end
local id, done_ms, dead_ms = tracked(ARGV, 5)
if not id then return 0 end
local key = ARGV[4] .. ':task:' .. id
local state = redis.call('HGET', key, 'state')
if state and FINAL[state] then return 0 end
local now = now_ms()
redis.call('HDEL', key, 'result', 'progress')
redis.call('HSET', key, 'state', 'running', 'started_at', now, 'worker', ARGV[2], 'type',
           task_type_of(ARGV, 5), 'done_ms', done_ms, 'dead_ms', dead_ms)
local attempt = redis.call('HINCRBY', key, 'attempts', 1)
redis.call('PERSIST', key)
track_event(ARGV[4], 'started', id, now, {'attempt', attempt, 'worker', ARGV[2]})
return attempt
