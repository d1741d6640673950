-- cancel_flow: cancel a flow's parent that waits for its children (Inspector::cancel): its
-- record and event say cancelled (which its own parent learns, as of any child that ends), its
-- unique lock is released, and its flow's keys go, so no child's end enqueues it.
-- KEYS[1] = the queue's stream (the flow's and the record's prefix, see lib/record.lua)
-- ARGV[1] = the task id
-- Returns 0 when the id is not a parent waiting for children (no flow: never one, enqueued
-- already, or cancelled), else {the ids of its unfinished children (the caller cancels them),
-- its record's flow_queues (its children in other queues: enqueue.lua; '' when none)}, read
-- before the cancel may delete the record (a retention of 0).
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
local flow = KEYS[1] .. ':flow:' .. ARGV[1]
local body = redis.call('HGET', flow, 'body')
if not body then return 0 end
local unfinished = redis.call('SMEMBERS', flow .. ':pending')
local elsewhere = redis.call('HGET', KEYS[1] .. ':task:' .. ARGV[1], 'flow_queues') or ''
redis.call('DEL', flow, flow .. ':pending', flow .. ':results')
local parts = cmsgpack.unpack(body)
task_end(KEYS[1], parts, 2, nil, 'cancelled', 'cancelled')
return {unfinished, elsewhere}
