-- cancel_waiting: remove one task that waits outside the queue's streams, in the delayed set or
-- in its tenant's backlog (Inspector::cancel).
-- KEYS[1] = the delayed set, or a tenant's backlog (a list: q:tenant:<t>[:p:high|:p:low])
-- ARGV[1] = the member (the element of the backlog), ARGV[2] = the queue's stream name (whose
-- uniqueness lock to release), ARGV[3] = 'backlog' when KEYS[1] is a backlog, else ''
-- Returns 1 when the task was removed, 0 when it was no longer there (moved when due or at its
-- tenant's turn, run now, or cancelled). A cancelled task is finished: its uniqueness lock
-- (unique_key) is released while it still holds this task's id, as cancel and a dead letter do.
-- A tracked task's record says cancelled (lib/record.lua). A backlog left empty is gone (a
-- list's key goes with its last element), and its tenant, when it has nothing else waiting,
-- leaves the ready and waiting sets (tenant_emptied: a paused one would stay waiting for good).
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
if ARGV[3] == 'backlog' then
  if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
  local fields = packed_strings(ARGV[1])
  if fields then
    task_end(ARGV[2], fields, 1, nil, 'cancelled', 'cancelled', {waited = true})
    tenant_emptied(ARGV[2], field_value(fields, 1, nil, TENANT_FIELD))
  end
  return 1
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local parts = delayed_parts(ARGV[1])
if parts then
  task_end(ARGV[2], parts, 4, nil, 'cancelled', 'cancelled', {waited = true})
end
return 1
