-- lib/unique.lua: the uniqueness locks of tasks (EnqueueOptions::unique_for).

-- release_unique(queue, fields, first): a finished task (dead-lettered, cancelled) gives up its
-- lock. When its fields fields[first], fields[first + 1], ... (name, value pairs) have a
-- unique_key and a task_id, and queue (the queue's stream name) is not '', the lock
-- <queue>:unique:<unique_key> is deleted, but only while it still holds this task's task_id (it
-- may have expired and been taken by a newer task, whose lock it is now). The lock's name is
-- read from the fields, so it is not among the script's KEYS; it shares the stream's hash tag
-- (every key of a queue derives from the stream name), so it is in the script's slot. GET
-- through pcall: a key of another type under that name is left alone and fails nothing.
local function release_unique(queue, fields, first)
  if not queue or queue == '' then return end
  local unique, task_id = nil, nil
  for i = first, #fields - 1, 2 do
    if fields[i] == 'unique_key' then
      unique = fields[i + 1]
    elseif fields[i] == 'task_id' then
      task_id = fields[i + 1]
    end
  end
  if unique and task_id then
    local lock = queue .. ':unique:' .. unique
    if redis.pcall('GET', lock) == task_id then redis.call('DEL', lock) end
  end
end
