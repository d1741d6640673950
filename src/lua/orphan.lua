-- orphan: the entry's body was deleted while this consumer held it. The fields it had read go
-- to the dead-letter stream as a record (provisional while its handler runs: replaced by the
-- entry's own completion, see replace.lua), and the entry leaves the pending list, so no
-- reclaimer dead-letters it a second time.
-- KEYS[1] = stream (the entry's priority level), KEYS[2] = dead-letter stream, KEYS[3] = the
--           entry's note (orphan_key() in keys.hpp: <level stream>:orphan:<entry id>), KEYS[4] =
--           the level's provisional records (orphans_key(): <level stream>:orphan:provisional)
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = entry id, ARGV[4] = how long the note lives
--           in ms (claim_min_idle; a holder whose handler runs renews it), ARGV[5..] = the
--           record, a 'dead_letter' fate as write_fate() in lib/fate.lua takes it.
-- Returns the record's id, also when an earlier call wrote it (a retry after a lost reply
-- gets the same answer from the note, not a second record); 0 when the entry is no longer
-- pending; -1 when another consumer owns it. The note of a final record (its handler never
-- started: the fate's queue is not '') holds "final <record id>", so that a replay does not
-- take it for a running task's.
-- A provisional record joins KEYS[4] ('<entry id> <record id>', scored now): once its holder is
-- gone and its note expired, settle_orphans.lua makes it the task's fate.
-- The note names the record by the level's stream and the entry id: ids are unique only
-- within one stream, and the high and normal levels routinely hold the same id. It expires
-- on its own, so nothing accumulates when bodies are trimmed (Overflow::trim_oldest).
-- One script: the record, the XACK and the note stand or fall together.
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
-- @include lib/fate.lua
local known = redis.call('GET', KEYS[3])
if known then return (string.gsub(known, '^final ', '')) end
local owner = pending_owner(KEYS[1], ARGV[1], ARGV[3])
if owner == nil then return 0 end
if owner ~= ARGV[2] then return -1 end
local id = write_fate(KEYS[2], 5, ARGV[3], ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
-- ARGV[10]: the dead-letter fate's queue ('' for a provisional record, see lib/fate.lua).
local provisional = ARGV[10] == ''
redis.call('SET', KEYS[3], provisional and id or ('final ' .. id), 'PX', ARGV[4])
if provisional then redis.call('ZADD', KEYS[4], now_ms(), ARGV[3] .. ' ' .. id) end
return id
