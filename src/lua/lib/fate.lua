-- lib/fate.lua: the one builder of dead-letter entries, and the write of an entry's fate.
--
-- dead_letter(dlq, fields, first, max_fields, reason, err, failed_at, original_id, consumer, queue)
-- XADDs a dead-letter entry to dlq and returns its id. The entry holds the original fields
-- fields[first], fields[first + 1], ... (name, value pairs), except the five named below,
-- which it sets itself; of those, at most max_fields are kept, and the number left out is
-- recorded in `fields_dropped` (unpack() cannot pass the ~8,000 values one XADD of more
-- would take). Then come error, failed_at, original_id, consumer and reason.
-- A dead-lettered task is finished: it ends dead through lib/settle.lua (its uniqueness lock
-- released, a tracked one's record dead, its flow's parent and its batch told), which a script
-- includes before this file; queue '' leaves all of it alone: a provisional record, whose task
-- still runs.
local function dead_letter(dlq, fields, first, max_fields, reason, err, failed_at, original_id, consumer, queue)
  local meta = {'error', err, 'failed_at', failed_at, 'original_id', original_id,
                'consumer', consumer, 'reason', reason}
  local own = {}
  for i = 1, #meta, 2 do own[meta[i]] = true end
  local args, kept, dropped = {}, 0, 0
  for i = first, #fields - 1, 2 do
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
  task_end(queue, fields, first, nil, 'dead', 'dead', {pairs = {'error', err, 'reason', reason}})
  return id
end

-- fate_error(fields, first): a retry copy's last_error.
local function fate_error(fields, first)
  for i = first, #fields - 1, 2 do
    if fields[i] == 'last_error' then return fields[i + 1] end
  end
  return ''
end

-- write_fate(dest, first, original_id, consumer) writes the fate that ARGV[first..] describes
-- and returns the new entry's id, or 'delayed':
--   'retry', queue, then the retry copy's fields: into dest (the stream; a tenant's task
--   into its tenant's backlog, lib/tenants.lua);
--   'delay', the delay in ms, a nonce, the stream to go to when due, queue, then the retry
--   copy's fields: a member of dest (the delayed set) due that long from the server's now
--   (the script must include lib/clock.lua and lib/delayed.lua before this library);
--   'hold', as 'delay', for a task put back unrun (a rate limit): no retry, no failure;
--   'back', queue, then the task's fields as they were: a task handed back unfinished and
--   uncounted (its worker stopped while it ran): into dest as a retry, its record queued;
--   'dead_letter', reason, error, failed_at, max_fields, queue (the stream name whose unique
--   lock to release, '' for none), then the fields read: a dead-letter entry in dest (the
--   dead-letter stream), built by dead_letter() above.
-- `queue` is the queue's stream: a tracked task's record there says what became of it.

local function write_fate(dest, first, original_id, consumer)
  if ARGV[first] == 'retry' then
    -- (The attempt's end first: it gives the tenant's slot back, and the copy, which has the same
    -- task id, may take a slot of its own as it enters.)
    task_end(ARGV[first + 1], ARGV, first + 2, nil, 'retrying', 'retry', {pairs = {'error', fate_error(ARGV, first + 2)}})
    return enter_stream(ARGV[first + 1], dest, ARGV, first + 2, #ARGV)
  end
  if ARGV[first] == 'back' then
    task_end(ARGV[first + 1], ARGV, first + 2, nil, 'queued', 'handed_back')
    return enter_stream(ARGV[first + 1], dest, ARGV, first + 2, #ARGV)
  end
  if ARGV[first] == 'delay' or ARGV[first] == 'hold' then
    local due = now_ms() + tonumber(ARGV[first + 1])
    redis.call('ZADD', dest, due, delayed_member(ARGV[first + 2], ARGV[first + 3], ARGV, first + 5, #ARGV))
    if ARGV[first] == 'hold' then
      task_end(ARGV[first + 4], ARGV, first + 5, nil, 'delayed', nil, {pairs = {'due_at', due}})
    else
      task_end(ARGV[first + 4], ARGV, first + 5, nil, 'retrying', 'retry',
               {pairs = {'error', fate_error(ARGV, first + 5), 'due_at', due}})
    end
    return 'delayed'
  end
  return dead_letter(dest, ARGV, first + 6, tonumber(ARGV[first + 4]), ARGV[first + 1],
                     ARGV[first + 2], ARGV[first + 3], original_id, consumer, ARGV[first + 5])
end
