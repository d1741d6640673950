-- flow_apply: the end of a flow's child that lives in another partition or queue than its parent,
-- carried to the parent's partition by a consumer's courier (src/consumer/flow_courier.cpp)
-- from the child's partition's outbox (see the flows across partitions in lib/record.lua).
-- Applied once however often it is carried: only while the child is in its parent's pending
-- set, as a child of the same partition.
-- KEYS[1] = the parent's queue (its partition's stream: the flow's prefix)
-- ARGV[1] = parent id, ARGV[2] = child id, ARGV[3] = its state (done, dead or cancelled),
-- ARGV[4] = its flow_on_failure, ARGV[5] = its result, ARGV[6] = its error, ARGV[7] = the
-- child's queue when that is not the parent's (a flow across queues), else ''
-- Returns 1; or 0 with nothing applied for a child in another queue that its parent's flow
-- does not place in that queue (its hash's `queue:<child id>`, see enqueue.lua): only the
-- workers of the queue a parent sent its child to may end it (an outbox entry written by hand in
-- another queue may not); or 2 when the flow is gone (released, cancelled, or expired: nothing
-- waits for the end, as for an end carried twice).
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
local state = ARGV[3]
if state ~= 'done' and state ~= 'dead' and state ~= 'cancelled' then
  return redis.error_reply('ERR flow_apply: state "' .. state .. '" is not a final state')
end
if ARGV[7] ~= '' then
  local flow = KEYS[1] .. ':flow:' .. ARGV[1]
  if redis.call('HGET', flow, 'queue:' .. ARGV[2]) ~= ARGV[7] then
    return redis.call('EXISTS', flow) == 1 and 0 or 2
  end
end
flow_child_ended(KEYS[1], ARGV[1], ARGV[2], state, ARGV[4], ARGV[5], ARGV[6])
return 1
