-- replace: the retry copy or dead letter of an orphaned entry (see orphan.lua) takes the
-- place of its provisional record.
-- KEYS[1] = dead-letter stream (holds the record), KEYS[2] = destination (the stream for a
--           retry copy, the delayed set for a delayed one, the dead-letter stream for a
--           dead letter), KEYS[3] = the entry's note (orphan_key() in keys.hpp)
-- ARGV[1] = record id, ARGV[2] = entry id, ARGV[3] = consumer, ARGV[4..] = the fate, as
--           write_fate() in lib/fate.lua takes it.
-- Returns the new entry's id ('delayed' for a delayed retry), or 0 when neither the record
-- nor its note is left: the fate was decided already (by an earlier call whose reply was
-- lost), or the holder went silent for claim_min_idle, the note expired, and an operator then
-- acted on the record as final (a replay skips a record while its note stands); also 0 when
-- the task is marked settled (lib/settled.lua): a reclaimer ended it from the
-- record (settle_orphans.lua) while this holder was cut off, and its parent, batch and lock
-- followed that end.
-- A record deleted, purged or trimmed while its note still names it was taken for final
-- although the task ran: the task's own fate is written all the same, or it would be lost.
-- One script: the new entry and the deletion of the record it replaces must happen together,
-- or the task would end in two places, or in none.
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
-- @include lib/settled.lua
-- @include lib/fate.lua
if is_settled(KEYS[3], ARGV[1]) then return 0 end
local noted = redis.call('GET', KEYS[3]) == ARGV[1]
local kept = #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) > 0
if not noted and not kept then return 0 end
local id = write_fate(KEYS[2], 4, ARGV[2], ARGV[3])
if kept then redis.call('XDEL', KEYS[1], ARGV[1]) end
if noted then redis.call('DEL', KEYS[3]) end
return id
