-- cancel_delayed: remove one delayed task (Inspector::cancel).
-- KEYS[1] = delayed set
-- ARGV[1] = the member, ARGV[2] = the queue's stream name (whose uniqueness lock to release)
-- Returns 1 when the member was removed, 0 when it was no longer there (moved when due, run
-- now, or cancelled). A cancelled task is finished: its uniqueness lock (unique_key) is
-- released while it still holds this task's id, as cancel and a dead letter do.
-- @include lib/delayed.lua
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local parts = delayed_parts(ARGV[1])
if parts then
  local unique, task_id = nil, nil
  for j = 4, #parts - 1, 2 do
    if parts[j] == 'unique_key' then unique = parts[j + 1] elseif parts[j] == 'task_id' then task_id = parts[j + 1] end
  end
  if unique and task_id then
    local lock = ARGV[2] .. ':unique:' .. unique
    if redis.pcall('GET', lock) == task_id then redis.call('DEL', lock) end
  end
end
return 1
