-- replay: put dead-lettered tasks back into their queue (Inspector::replay).
-- KEYS[1] = dead-letter stream, KEYS[2] = the stream to add them to, KEYS[3..] = the queue's
--           level streams (where a dead letter's original entry may have been)
-- ARGV[1] = replayed_at (ISO 8601 UTC), ARGV[2] = only this task_type ('' = any), ARGV[3] =
-- only this reason ('' = any), ARGV[4..] = dead-letter entry ids (a bounded batch)
-- Returns one value per id: the new entry's id, 0 when the id is not in the dead-letter
-- stream (already replayed or deleted), -1 when the entry is not a task (no task_type or
-- payload, e.g. a malformed delayed member's bytes), -2 when it does not match the filter,
-- -3 when it is the provisional record of a task still running (its body was deleted while
-- its handler ran: the note <level stream>:orphan:<original id> names it, see orphan.lua;
-- the task's own completion replaces it, and it becomes final if the worker goes silent for
-- claim_min_idle); those are left in place.
-- Each task gets a fresh attempt count (retry_count 0) and keeps its history: the dead
-- letter's error becomes last_error, replayed_from names the dead-letter entry, replay_count
-- counts replays, replayed_at says when. The dead letter's own fields (error, failed_at,
-- original_id, consumer, reason, fields_dropped) are not copied. One script per batch: each
-- task is added and its dead letter deleted together, so none is ever in both places.
-- A tracked task's record starts again as queued, with an 'enqueued' event (lib/record.lua).
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/events.lua
-- @include lib/record.lua
local own = {error = true, failed_at = true, original_id = true, consumer = true, reason = true,
             fields_dropped = true, retry_count = true, replay_count = true, replayed_from = true,
             replayed_at = true, last_error = true}
-- Whether a running task's note names dead letter `id` (keys of the queue's slot, built here
-- from the level streams as orphan_key() builds them).
local function held(original_id, id)
  if not original_id then return false end
  for k = 3, #KEYS do
    if redis.call('GET', KEYS[k] .. ':orphan:' .. original_id) == id then return true end
  end
  return false
end
local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local found = redis.call('XRANGE', KEYS[1], id, id)
  if #found == 0 then
    out[#out + 1] = 0
  else
    local f = found[1][2]
    local args, get = {}, {}
    for j = 1, #f, 2 do
      get[f[j]] = f[j + 1]
      if not own[f[j]] then
        args[#args + 1] = f[j]
        args[#args + 1] = f[j + 1]
      end
    end
    if not get.task_type or not get.payload then
      out[#out + 1] = -1
    elseif held(get.original_id, id) then
      out[#out + 1] = -3
    elseif (ARGV[2] ~= '' and get.task_type ~= ARGV[2]) or (ARGV[3] ~= '' and get.reason ~= ARGV[3]) then
      out[#out + 1] = -2
    else
      local replays = (tonumber(get.replay_count) or 0) + 1
      for _, v in ipairs({'retry_count', '0', 'replay_count', tostring(replays), 'replayed_from', id,
                          'replayed_at', ARGV[1], 'last_error', get.error or get.last_error or ''}) do
        args[#args + 1] = v
      end
      out[#out + 1] = enter_stream(KEYS[4], KEYS[2], args, 1, #args)  -- (a tenant's task: its backlog)
      redis.call('XDEL', KEYS[1], id)
      record_new(KEYS[4], args, 1, #args, 'queued')
    end
  end
end
return out
