-- start: record that a handler starts a reclaimed or replayed entry.
-- KEYS[1] = stream
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4] = new delivery count.
-- Returns 1; 0 when this consumer no longer owns the entry (it must not run it); -1 when the
-- entry's body is gone (it must not run it either: the caller dead-letters the fields it read).
-- One script: XCLAIM ... RETRYCOUNT sets the counter the poison check reads, and with
-- min-idle 0 it would steal the entry from a new owner, so the owner check comes with it.
-- JUSTID keeps the counter from being bumped a second time.
-- @include lib/owner.lua
if pending_owner(KEYS[1], ARGV[1], ARGV[3]) ~= ARGV[2] then return 0 end
if #redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3]) == 0 then return -1 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
