-- watch: a wait's read of a tracked task's record (Producer::wait).
-- KEYS[1] = the record, <queue>:task:<task_id>
-- Returns the record's fields (HGETALL: empty when there is none). A record of a task that has
-- not finished is marked waited on (field `waited`): when the task ends, lib/settle.lua keeps it
-- for a minute even when its retention says 0, so the waiter reads what the task returned.
local state = redis.pcall('HGET', KEYS[1], 'state')
if type(state) == 'string' and state ~= 'done' and state ~= 'dead' and state ~= 'cancelled' then
  redis.call('HSET', KEYS[1], 'waited', '1')
end
return redis.call('HGETALL', KEYS[1])
