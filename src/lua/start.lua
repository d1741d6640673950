-- start: record that a handler starts a reclaimed or replayed entry.
-- KEYS[1] = stream
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4] = new delivery count,
-- ARGV[5] = the queue's stream name (a tracked task's record, a unique lock: lib/record.lua).
-- Returns 1; 0 when this consumer no longer owns the entry (it must not run it); -1 when the
-- entry's body is gone (it must not run it either: the caller dead-letters the fields it read);
-- -2 when an operator cancelled it (its cancel request exists, see cancel.lua): it ends
-- cancelled here (acknowledged and deleted, its unique lock released, its record `cancelled`,
-- the request deleted) and must not run.
-- One script: XCLAIM ... RETRYCOUNT sets the counter the poison check reads, and with
-- min-idle 0 it would steal the entry from a new owner, so the owner check comes with it.
-- JUSTID keeps the counter from being bumped a second time.
-- @include lib/owner.lua
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
-- @include lib/cancelled.lua
if pending_owner(KEYS[1], ARGV[1], ARGV[3]) ~= ARGV[2] then return 0 end
local body = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
if #body == 0 then return -1 end
if redis.call('EXISTS', KEYS[1] .. ':cancel:' .. ARGV[3]) == 1 then
  end_cancelled(KEYS[1], ARGV[1], ARGV[3], ARGV[5], body[1][2], 1)
  return -2
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
