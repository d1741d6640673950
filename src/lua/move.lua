-- move: owner-checked retry or dead-letter of one entry.
-- KEYS[1] = stream, KEYS[2] = destination (the stream itself for a retry copy, the delayed
--           set for a delayed one, or the dead-letter stream)
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4..] = the fate, as
--           write_fate() in lib/fate.lua takes it.
-- Returns the new entry's id ('delayed' for a delayed retry), 'cancelled' when a retry or a
-- put-back found the entry's cancel request (the task ends cancelled instead, see
-- cancelled_instead() in lib/cancelled.lua); 0 when the entry is no longer
-- pending (acked or gone); -1 when another consumer owns it (it was reclaimed: that consumer
-- decides its fate).
-- One script: XACK alone does not check ownership, and the new entry and the removal of the
-- old one must happen together, or a crash between them loses the task or runs it twice.
-- @include lib/owner.lua
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/delayed.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
-- @include lib/cancelled.lua
-- @include lib/fate.lua
local owner = pending_owner(KEYS[1], ARGV[1], ARGV[3])
if owner == nil then return 0 end
if owner ~= ARGV[2] then return -1 end
if cancelled_instead(KEYS[1], ARGV[1], 4, ARGV[3]) then return 'cancelled' end
local id = write_fate(KEYS[2], 4, ARGV[3], ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return id
