-- lib/unique.lua: the uniqueness locks of tasks (EnqueueOptions::unique_for). A finished task
-- (done, dead-lettered, cancelled: lib/settle.lua, release.lua) gives up its lock, but only
-- while the lock still holds this task's id (it may have expired and been taken by a newer
-- task, whose lock it is now).
-- Input: unique_release_lock(lock, task_id): the lock's key and the task id; unique_release(
--   queue, fields, first, last): the lock named by the task's fields (its unique_key and
--   task_id among fields[first..last]; last: nil = the end) in queue (the queue's stream
--   name; '' or nil: nothing). The lock's name is built from the queue's, so it shares the
--   stream's hash tag and is in the script's slot.
-- Output: the lock deleted (DEL), or left alone; unique_release_lock says which (true:
--   deleted). GET through pcall: a key of another type under that name is left alone and fails
--   nothing. A script including this file includes lib/fields.lua before it.

local function unique_release_lock(lock, task_id)
  if not task_id or lock == '' or redis.pcall('GET', lock) ~= task_id then return false end
  redis.call('DEL', lock)
  return true
end

local function unique_release(queue, fields, first, last)
  if not queue or queue == '' then return end
  local unique, task_id = field_pair(fields, first, last, 'unique_key', 'task_id')
  if unique then unique_release_lock(queue .. ':unique:' .. unique, task_id) end
end
