-- lib/fate.lua: the one builder of dead-letter entries, and the write of an entry's fate.
--
-- dead_letter(dlq, fields, first, max_fields, reason, err, failed_at, original_id, consumer, queue)
-- XADDs a dead-letter entry to dlq and returns its id. The entry holds the original fields
-- fields[first], fields[first + 1], ... (name, value pairs), except the five named below,
-- which it sets itself; of those, at most max_fields are kept, and the number left out is
-- recorded in `fields_dropped` (unpack() cannot pass the ~8,000 values one XADD of more
-- would take). Then come error, failed_at, original_id, consumer and reason.
-- A dead-lettered task is finished: when its fields have a unique_key (EnqueueOptions::
-- unique_for) and queue (the queue's stream name) is not '', its uniqueness lock
-- <queue>:unique:<unique_key> is deleted, but only while it still holds this task's task_id
-- (it may have expired and been taken by a newer task, whose lock it is now). The lock's name
-- is read from the entry, so it is not among the script's KEYS; it shares the stream's hash
-- tag (every key of a queue derives from the stream name), so it is in the script's slot.
-- GET through pcall: a key of another type under that name is left alone, and never makes the
-- dead letter itself fail.
local function dead_letter(dlq, fields, first, max_fields, reason, err, failed_at, original_id, consumer, queue)
  local meta = {'error', err, 'failed_at', failed_at, 'original_id', original_id,
                'consumer', consumer, 'reason', reason}
  local own = {}
  for i = 1, #meta, 2 do own[meta[i]] = true end
  local args, kept, dropped = {}, 0, 0
  local unique, task_id = nil, nil
  for i = first, #fields - 1, 2 do
    if fields[i] == 'unique_key' then
      unique = fields[i + 1]
    elseif fields[i] == 'task_id' then
      task_id = fields[i + 1]
    end
    if own[fields[i]] then
      -- replaced by this entry's own value below
    elseif kept >= max_fields then
      dropped = dropped + 1
    else
      args[#args + 1] = fields[i]
      args[#args + 1] = fields[i + 1]
      kept = kept + 1
    end
  end
  if dropped > 0 then
    args[#args + 1] = 'fields_dropped'
    args[#args + 1] = tostring(dropped)
  end
  for _, v in ipairs(meta) do args[#args + 1] = v end
  local id = redis.call('XADD', dlq, '*', unpack(args))
  if unique and task_id and queue and queue ~= '' then
    local lock = queue .. ':unique:' .. unique
    if redis.pcall('GET', lock) == task_id then redis.call('DEL', lock) end
  end
  return id
end

-- write_fate(dest, first, original_id, consumer) writes the fate that ARGV[first..] describes
-- and returns the new entry's id, or 'delayed':
--   'retry', then the retry copy's fields: XADD to dest (the stream);
--   'delay', the delay in ms, a nonce, the stream to go to when due, then the retry copy's
--   fields: a member of dest (the delayed set) due that long from the server's now (the
--   script must include lib/clock.lua and lib/delayed.lua before this library);
--   'dead_letter', reason, error, failed_at, max_fields, queue (the stream name whose unique
--   lock to release, '' for none), then the fields read: a dead-letter entry in dest (the
--   dead-letter stream), built by dead_letter() above.
local function write_fate(dest, first, original_id, consumer)
  if ARGV[first] == 'retry' then
    return redis.call('XADD', dest, '*', unpack(ARGV, first + 1))
  end
  if ARGV[first] == 'delay' then
    local due = now_ms() + tonumber(ARGV[first + 1])
    redis.call('ZADD', dest, due, delayed_member(ARGV[first + 2], ARGV[first + 3], ARGV, first + 4, #ARGV))
    return 'delayed'
  end
  return dead_letter(dest, ARGV, first + 6, tonumber(ARGV[first + 4]), ARGV[first + 1],
                     ARGV[first + 2], ARGV[first + 3], original_id, consumer, ARGV[first + 5])
end
