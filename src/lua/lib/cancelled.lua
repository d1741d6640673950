-- lib/cancelled.lua: the end of a task an operator cancelled while no handler ran it (its
-- cancel request `<stream>:cancel:<id>` exists, see cancel.lua). A script includes
-- lib/settle.lua (and what it needs) before this file.
--
-- end_cancelled(stream, group, id, queue, fields, first): entry `id` of `stream` ends
-- cancelled: acknowledged in `group` and deleted, and ended cancelled through lib/settle.lua
-- (the task's fields are fields[first], fields[first + 1], ...; `queue` is the queue's stream),
-- the request deleted.
local function end_cancelled(stream, group, id, queue, fields, first)
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
  task_end(queue, fields, first, nil, 'cancelled', 'cancelled')
  redis.call('DEL', stream .. ':cancel:' .. id)
end

-- cancelled_instead(stream, group, first, original_id): when the fate ARGV[first..] (as
-- write_fate() of lib/fate.lua takes it) is a retry or a put-back and an operator cancelled
-- entry `original_id` of `stream` meanwhile, the task ends cancelled instead (end_cancelled).
-- True then; false otherwise (nothing written). A cancel must not be lost to a new entry id.
local function cancelled_instead(stream, group, first, original_id)
  local kind = ARGV[first]
  if kind ~= 'retry' and kind ~= 'back' and kind ~= 'delay' and kind ~= 'hold' then return false end
  if redis.call('EXISTS', stream .. ':cancel:' .. original_id) == 0 then return false end
  local queue, fields = ARGV[first + 1], first + 2
  if kind == 'delay' or kind == 'hold' then queue, fields = ARGV[first + 4], first + 5 end
  end_cancelled(stream, group, original_id, queue, ARGV, fields)
  return true
end
