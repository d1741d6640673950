-- cancel: delete a queued task that no consumer of the group has been given (Inspector::cancel).
-- KEYS[1] = the stream (one priority level of the queue)
-- ARGV[1] = the consumer group, ARGV[2] = the entry id, ARGV[3] = the queue's stream name
--           (whose uniqueness lock to release)
-- Returns {'cancelled'}, {'missing'} (no such entry: done, cancelled or never there), or
-- {'pending', consumer, idle ms, deliveries}: delivered to that consumer and not finished, so
-- it may be running; it is left alone (a running handler is never interrupted).
-- One script: the pending check and the XDEL do not interleave with a consumer's read.
-- A cancelled task is finished: its uniqueness lock (unique_key) is released while it still
-- holds this task's id, as a dead letter does (lib/unique.lua).
-- @include lib/unique.lua
local found = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if #found == 0 then return {'missing'} end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if type(p) == 'table' and not p.err and #p > 0 then
  return {'pending', p[1][2], p[1][3], p[1][4]}
end
redis.call('XDEL', KEYS[1], ARGV[2])
release_unique(ARGV[3], found[1][2], 1)
return {'cancelled'}
