-- settle_orphans: the provisional dead-letter records (orphan.lua) whose holder is gone. A
-- record is provisional while its task's handler runs: its holder renews the record's note
-- with its leases, and the task's own completion replaces the record. Once the holder is gone
-- (killed, or stopped with the handler still running) the note expires after claim_min_idle
-- and the record is the task's fate: the task ends dead here, through lib/settle.lua, with the
-- record's fields (its own, as the holder had read them): its record says dead, its unique lock
-- is released, its flow's parent follows its failure policy, its batch counts it failed.
-- KEYS[1] = the level's stream (its notes' prefix), KEYS[2] = dead-letter stream, KEYS[3] = the
--           level's provisional records (orphans_key() in keys.hpp: '<entry id> <record id>',
--           scored by when written or last found noted, ms)
-- ARGV[1] = the queue's stream (the records' and the locks' prefix), ARGV[2] = claim_min_idle
--           (ms: a member younger than this is not looked at), ARGV[3] = most members per call
-- Returns how many tasks ended here. A member whose note stands is scored now (looked at again
-- a claim_min_idle later); one whose record is gone (replaced by its task's own completion,
-- or deleted by an operator) just leaves the set. A task ended here is marked settled
-- (lib/settled.lua): its holder may only have been cut off from the server for claim_min_idle,
-- and its late completion must settle nothing a second time.
-- One script: a completion's replace.lua runs before or after it, never between its check of
-- the note and the end it writes.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
-- @include lib/settled.lua
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, tonumber(ARGV[3]))
local ended = 0
for _, member in ipairs(due) do
  local entry, record = string.match(member, '^(%S+) (%S+)$')
  if entry and redis.call('EXISTS', KEYS[1] .. ':orphan:' .. entry) == 1 then
    redis.call('ZADD', KEYS[3], now, member)
  else
    redis.call('ZREM', KEYS[3], member)
    local found = entry and redis.call('XRANGE', KEYS[2], record, record) or {}
    if #found > 0 then
      local fields = found[1][2]
      -- A holder that was only cut off, not gone, and comes back to complete the task finds
      -- it settled (done.lua, replace.lua).
      mark_settled(KEYS[1] .. ':orphan:' .. entry, record)
      task_end(ARGV[1], fields, 1, nil, 'dead', 'dead',
               {pairs = {'error', field_value(fields, 1, nil, 'error') or '', 'reason',
                         field_value(fields, 1, nil, 'reason') or 'body_lost'}})
      ended = ended + 1
    end
  end
end
return ended
