-- lib/batches.lua: batches (Producer::open_batch): what a member's first final state settles in
-- its batch. A script including this file includes lib/clock.lua, lib/fields.lua,
-- lib/events.lua and lib/record.lua before it.
-- Input: batch_member_ended(queue, batch, member, ok), called by lib/settle.lua for a tracked
--   task's first final state (ok: done) and by a nested batch that fired; batch_fire(queue,
--   batch) by batch.lua's close.
-- Output: the batch's counts and pending set (below); once it is closed with nothing pending,
--   its callbacks enqueued, once.

-- Batches (Producer::open_batch). Batch B of a queue is kept in the queue's slot:
--   <queue>:batches:B          hash: state (open, closed, fired), total, done, failed (its
--                              members so far, and how many ended each way), on_complete and
--                              on_success (a callback's stream and fields, packed as a flow's body),
--                              parent (the batch B is a member of, if any)
--   <queue>:batches:B:pending  set: its members not finished: task ids, and 'batch:' .. id for a
--                              nested batch
-- A task of B carries batch_id (B). A member's end is counted once (its SREM); the script that
-- leaves a closed batch with nothing pending fires it (state fired, only from closed): its
-- on_complete is enqueued, and its on_success when no member failed; a nested batch then ends
-- as a member of its parent (done when none of its members failed). A fired batch's counts
-- stay BATCH_KEEP ms.
local BATCH_KEEP = 86400000
local batch_member_ended

-- batch_fire(queue, batch): the closed batch has nothing pending: its callbacks go.
local function batch_fire(queue, batch)
  local key = queue .. ':batches:' .. batch
  local b = redis.call('HMGET', key, 'state', 'failed', 'on_complete', 'on_success', 'parent')
  if b[1] ~= 'closed' then return end
  redis.call('HSET', key, 'state', 'fired')
  local failed = tonumber(b[2]) or 0
  for _, packed in ipairs({b[3] or '', failed == 0 and b[4] or ''}) do
    if packed ~= '' then
      local parts = cmsgpack.unpack(packed)
      enter_stream(queue, parts[1], parts, 2, #parts)
      record_new(queue, parts, 2, #parts, 'queued', 0)
    end
  end
  redis.call('PEXPIRE', key, BATCH_KEEP)  -- (its pending set is empty: Redis deleted it)
  if b[5] then batch_member_ended(queue, b[5], 'batch:' .. batch, failed == 0) end
end

-- batch_member_ended(queue, batch, member, ok): a member of `batch` ended (ok: done), once.
batch_member_ended = function(queue, batch, member, ok)
  local key = queue .. ':batches:' .. batch
  if redis.call('SREM', key .. ':pending', member) == 0 then return end
  redis.call('HINCRBY', key, ok and 'done' or 'failed', 1)
  if redis.call('SCARD', key .. ':pending') == 0 then batch_fire(queue, batch) end
end
