-- batch: open or close a batch of tasks (Producer::open_batch, close_batch; see the batches in
-- lib/record.lua).
-- KEYS[1] = the queue's stream (the batch's prefix)
-- ARGV[1] = 'open' or 'close', ARGV[2] = the batch id; to open:
--   ARGV[3] = the batch it is nested in ('' for none), then per callback (on_complete, then
--   on_success): m (0 for none), the stream it goes to, then its m - 1 field and value strings.
-- open returns 1, or an error with nothing written: "BATCHEXISTS ..." (the id is taken) or
-- "BATCHCLOSED ..." (the parent batch is not open). close returns 1 when it closed the batch
-- (and fired it, when nothing was pending), 0 when it was closed already, or the error
-- "BATCHCLOSED ..." when there is no such batch.
-- One script: a nested batch joins its parent while that is open; a close and the last member's
-- end cannot both fire the batch.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/batches.lua
local key = KEYS[1] .. ':batches:' .. ARGV[2]
if ARGV[1] == 'close' then
  local state = redis.pcall('HGET', key, 'state')
  if type(state) ~= 'string' then return redis.error_reply('BATCHCLOSED batch ' .. ARGV[2] .. ' does not exist') end
  if state ~= 'open' then return 0 end
  redis.call('HSET', key, 'state', 'closed')
  if redis.call('SCARD', key .. ':pending') == 0 then batch_fire(KEYS[1], ARGV[2]) end
  return 1
end
if redis.call('EXISTS', key) == 1 then return redis.error_reply('BATCHEXISTS batch ' .. ARGV[2] .. ' exists') end
local parent = ARGV[3]
if parent ~= '' then
  local parent_key = KEYS[1] .. ':batches:' .. parent
  if redis.call('HGET', parent_key, 'state') ~= 'open' then
    return redis.error_reply('BATCHCLOSED batch ' .. parent .. ' is not open')
  end
  redis.call('SADD', parent_key .. ':pending', 'batch:' .. ARGV[2])
  redis.call('HINCRBY', parent_key, 'total', 1)
end
local fields = {'state', 'open', 'total', 0, 'done', 0, 'failed', 0}
local i = 4
for _, name in ipairs({'on_complete', 'on_success'}) do
  local m = tonumber(ARGV[i])
  if m > 0 then
    fields[#fields + 1] = name
    fields[#fields + 1] = cmsgpack.pack({unpack(ARGV, i + 1, i + m)})
  end
  i = i + m + 1
end
if parent ~= '' then
  fields[#fields + 1] = 'parent'
  fields[#fields + 1] = parent
end
redis.call('HSET', key, unpack(fields))
return 1
