-- replace: the retry copy or dead letter of an orphaned entry (see orphan.lua) takes the
-- place of its provisional record.
-- KEYS[1] = dead-letter stream (holds the record), KEYS[2] = destination (the stream for a
--           retry copy, the delayed set for a delayed one, the dead-letter stream for a
--           dead letter), KEYS[3] = orphans
-- ARGV[1] = record id, ARGV[2] = entry id, ARGV[3] = consumer, ARGV[4..] = the fate, as
--           write_fate() in lib/fate.lua takes it.
-- Returns the new entry's id ('delayed' for a delayed retry), or 0 when the record is gone:
-- someone (an operator's replay or delete) already acted on it, so it is no longer this
-- consumer's to decide.
-- One script: the new entry and the deletion of the record it replaces must happen together,
-- or the task would end in two places, or in none.
-- @include lib/clock.lua
-- @include lib/delayed.lua
-- @include lib/unique.lua
-- @include lib/fate.lua
redis.call('HDEL', KEYS[3], ARGV[2])
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
local id = write_fate(KEYS[2], 4, ARGV[2], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[1])
return id
