-- orphan: the entry's body was deleted while this consumer held it. The fields it had read go
-- to the dead-letter stream as a provisional record (replaced by the entry's own completion,
-- see replace.lua), and the entry leaves the pending list, so no reclaimer dead-letters it
-- a second time.
-- KEYS[1] = stream, KEYS[2] = dead-letter stream, KEYS[3] = orphans (hash: entry id -> record id)
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4..] = the record, a
--           'dead_letter' fate as write_fate() in lib/fate.lua takes it.
-- Returns the record's id, also when an earlier call wrote it (a retry after a lost reply
-- gets the same answer, not a second record); 0 when the entry is no longer pending; -1 when
-- another consumer owns it.
-- One script: the record, the XACK and the note in the orphans hash stand or fall together.
-- @include lib/owner.lua
-- @include lib/clock.lua
-- @include lib/delayed.lua
-- @include lib/unique.lua
-- @include lib/fate.lua
local known = redis.call('HGET', KEYS[3], ARGV[3])
if known then return known end
local owner = pending_owner(KEYS[1], ARGV[1], ARGV[3])
if owner == nil then return 0 end
if owner ~= ARGV[2] then return -1 end
local id = write_fate(KEYS[2], 4, ARGV[3], ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[3], id)
return id
