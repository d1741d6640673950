-- cancel_delayed: remove one delayed task (Inspector::cancel).
-- KEYS[1] = delayed set
-- ARGV[1] = the member, ARGV[2] = the queue's stream name (whose uniqueness lock to release)
-- Returns 1 when the member was removed, 0 when it was no longer there (moved when due, run
-- now, or cancelled). A cancelled task is finished: its uniqueness lock (unique_key) is
-- released while it still holds this task's id, as cancel and a dead letter do.
-- A tracked task's record says cancelled (lib/record.lua).
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
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local parts = delayed_parts(ARGV[1])
if parts then
  task_end(ARGV[2], parts, 4, nil, 'cancelled', 'cancelled')
end
return 1
