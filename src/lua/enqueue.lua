-- enqueue: add a batch of tasks (immediate or delayed, any priority, unique or not) unless
-- the backlog would exceed max_len.
-- KEYS[1] = stream (normal priority), KEYS[2] = high stream, KEYS[3] = low stream,
-- KEYS[4] = delayed set, then the unique locks the tasks name (unique_lock_key() in
-- keys.hpp), or in the 'debounce' layout the task's debounce key (debounce_key()), then, when
-- ARGV[3] > 0, the batch's mark (batch_refused_key()), passed by enqueue_batch when it sends
-- more than one chunk of a partition.
-- ARGV[1] = 'reject' (the backlog gate: Overflow::reject), 'each' (the gate, for each task on
--           its own: single enqueues of plain tasks merged into one call by the producer, see
--           src/producer/merged_enqueue.hpp; 'plain' layout, no mark), 'trim' (no gate; immediate
--           entries are added with MAXLEN ~ max_len, as the seed does) or 'placed' (a flow's
--           children placed in their partition, see below: no gate, no trim, KEYS[5] is the
--           placement's guard, set by its last write, and nothing is written when it is set
--           already), ARGV[2] = max_len,
-- ARGV[3] = this chunk's place (1, 2, ...) among its batch's chunks when the last key is the
--           mark, else 0, ARGV[4] = n (tasks),
-- ARGV[5] = the tasks' layout, then the tasks:
--   'full':  per task dest (1-3: the KEYS index of its stream), at (absolute due time in ms,
--            0 = none), delay (ms from the server's now, 0 = none), lock (KEYS index of its
--            unique lock, 0 = none), lock_ms (the lock's lifetime), nonce (for a delayed
--            member), m (the number of field and value strings), then the m strings;
--   'plain': every task immediate, normal priority and not unique, so per task only m and
--            the m strings (the common case: a third fewer arguments to send and parse);
--   'debounce': one task (n = 1, ARGV[3] = 0) debounced under KEYS[5] (lib/debounce.lua): dest,
--            delay (ms), window (ms), mode ('keep_first' or 'replace_latest'), nonce, m, then
--            the m strings. Returns the id of the task that will run (this one's, or the
--            waiting task's it was absorbed into), or an error with nothing written (QUEUEFULL
--            for a new task only, WRONGTYPE, "DEBOUNCETYPE ..." for a task type other than the
--            waiting task's).
-- Returns n ('each': one reply per task, 1 when it was written, else its QUEUEFULL error, as
-- a call of its own would have had it), or an error with nothing written: "QUEUEFULL ...", "BATCHCLOSED ..." (a task of a
-- batch that is not open, see Producer::open_batch and the batches in lib/record.lua) or
-- "DUPLICATE <index in this call> <length of the id> <task id holding the lock> ...", or
-- "WRONGTYPE ..." (a lock key holds something else; the batch is marked refused too), 0
-- with nothing written when an earlier chunk of the same batch was refused, or -1 with
-- nothing written when the chunk before this one has not run (yet). Callers know
-- their tasks by task_id, so entry ids are not sent back (building that reply costs ~10%).
-- One script: the checks and the writes must not interleave with other producers'.
-- The backlog is every priority's stream plus the delayed set (streamq deletes finished
-- entries, so XLEN is the unfinished backlog): adding only while it stays <= max_len means
-- no XADD here needs MAXLEN, so no unread task is ever trimmed.
-- A task due by the server's clock (no delay, or a due time already past) goes straight to
-- its stream; a later one to the delayed set, whole (lib/delayed.lua), for the forwarder.
-- The chunks of one batch are pipelined: a refused chunk sets the mark to 'refused', so the
-- chunks behind it write nothing even if room appears (a smaller last chunk, a consumer's
-- XDEL); a written one sets it to its place, so a chunk whose predecessor was not run (a
-- NOSCRIPT after a failover or SCRIPT FLUSH, while another client's EVAL cached the script
-- again for the ones behind it) writes nothing either, and the producer sends them again in
-- order: what a batch wrote is always a prefix of it, in order. The mark expires a minute
-- after its last use.
-- A tracked task (its fields hold `retention`, lib/record.lua) gets its record and an
-- 'enqueued' event in the same call; such tasks come in the 'full' layout.
-- A flow (Producer::enqueue_flow) comes whole in one call, in the 'full' layout: a parent's
-- dest is negative (-1 to -3: the stream it goes to once its children finished); it waits in
-- <queue>:flow:<id> and its record says waiting; a child's flow_parent field names its parent,
-- whose pending set and order of children it joins (see the flows in lib/record.lua).
-- A flow across partitions: the call to the home partition (the root's, where every parent
-- is) lists each child of another partition as a stub (dest 0: task_id and flow_parent only),
-- which joins its parent's pending set and order and is written nowhere; after the tasks come
-- k, then k times the partition's stream, a token and the enqueue call that places its
-- children there ('placed', packed by the producer; KEYS[5] of it is the guard
-- <partition>:flows:placed:<token>), each kept in the home's hash <queue>:flows:placing under
-- its token, as `<length>:<now ms><length>:<partition><length>:<call>`, for the producer, or
-- else a consumer's courier, to make (src/consumer/flow_courier.hpp). A child placed
-- elsewhere carries flow_home, and joins no set in its own partition. A flow across queues
-- is written the same way: a stub of a child in another queue (FlowNode::queue) names that
-- queue (its flow_queue field), kept in its parent's record as flow_queues
-- (`<length>:<id><length>:<queue>` each) so the Inspector finds the child there, and in its
-- parent's flow hash as `queue:<id>` (flow_apply.lua checks an end from another queue by it).
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/delayed.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/debounce.lua
local PLACED_KEEP = 86400000  -- ms a placement's guard stays (the producer shortens it once done)
local gate = ARGV[1] == 'reject'
local each = ARGV[1] == 'each'
local trim = ARGV[1] == 'trim'
local max_len = tonumber(ARGV[2])
local mark = nil
local place = tonumber(ARGV[3])
if place > 0 then mark = KEYS[#KEYS] end
local n = tonumber(ARGV[4])
if mark then
  local state = redis.call('GET', mark)
  if state == 'refused' then
    redis.call('PEXPIRE', mark, 60000)
    return 0
  end
  if (tonumber(state) or 0) ~= place - 1 then return -1 end
end
local function refuse(message)
  if mark then redis.call('SET', mark, 'refused', 'PX', 60000) end
  return redis.error_reply(message)
end
local function written()
  if mark then redis.call('SET', mark, place, 'PX', 60000) end
  return n
end
local function backlog()
  return redis.call('XLEN', KEYS[1]) + redis.call('XLEN', KEYS[2]) + redis.call('XLEN', KEYS[3]) +
         redis.call('ZCARD', KEYS[4])
end
local function queue_full(len, adding)
  return 'QUEUEFULL ' .. KEYS[1] .. ' holds ' .. len .. ' unfinished tasks; adding ' .. adding ..
         ' would exceed max_len ' .. max_len
end
-- The plain layout: per task m, then its m strings. Calls add(t, first, last) for task t, whose
-- strings are ARGV[first..last], in order.
local function for_plain(add)
  local i = 6
  for t = 1, n do
    local last = i + tonumber(ARGV[i])
    add(t, i + 1, last)
    i = last + 1
  end
end
local function xadd_plain(first, last)
  if trim then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', max_len, '*', unpack(ARGV, first, last))
  else
    redis.call('XADD', KEYS[1], '*', unpack(ARGV, first, last))
  end
end
if each then
  -- As n calls of one task each, in order: a refused task does not refuse the others.
  if ARGV[5] ~= 'plain' then return redis.error_reply("ERR enqueue: 'each' takes the plain layout") end
  local len, out = backlog(), {}
  for_plain(function(t, first, last)
    if len + 1 > max_len then
      out[t] = redis.error_reply(queue_full(len, 1))
    else
      xadd_plain(first, last)
      len = len + 1
      out[t] = 1
    end
  end)
  return out
end
if ARGV[5] == 'debounce' then
  if n ~= 1 or mark then return redis.error_reply("ERR enqueue: 'debounce' takes one task and no mark") end
  local m = tonumber(ARGV[11])
  return debounce_enqueue({KEYS[1], KEYS[2], KEYS[3]}, KEYS[4], KEYS[5], tonumber(ARGV[6]), tonumber(ARGV[7]),
                          tonumber(ARGV[8]), ARGV[9], ARGV[10], ARGV, 12, 11 + m, function()
    -- A new task is gated as any other; a call absorbed into the waiting one adds nothing.
    local len = gate and backlog() or 0
    if gate and len + 1 > max_len then return redis.error_reply(queue_full(len, 1)) end
    return nil
  end)
end
if gate then
  local len = backlog()
  if len + n > max_len then return refuse(queue_full(len, n)) end
end
local placed = ARGV[1] == 'placed'
if placed and redis.call('EXISTS', KEYS[5]) == 1 then return n end
if ARGV[5] == 'plain' then
  for_plain(function(_, first, last) xadd_plain(first, last) end)
  return written()
end
-- Each task's header: dest, at, delay, lock, lock_ms, nonce, m; its strings follow.
-- Every lock is checked before anything is written, so a refused call writes nothing; the
-- task id is a task's second string (append_new_task writes task_id first).
if #KEYS > (mark and 5 or 4) then
  local taken, i = {}, 6
  for t = 1, n do
    local lock = tonumber(ARGV[i + 3])
    if lock > 0 then
      local key = KEYS[lock]
      local holder = taken[key] or redis.pcall('GET', key)
      if type(holder) == 'table' and holder.err then
        return refuse('WRONGTYPE the unique lock ' .. key .. ' holds a value that is not a string')
      end
      if holder then
        return refuse('DUPLICATE ' .. (t - 1) .. ' ' .. #holder .. ' ' .. holder .. ' holds ' .. key)
      end
      taken[key] = ARGV[i + 8]
    end
    i = i + 7 + tonumber(ARGV[i + 6])
  end
end
-- A task of a batch (its batch_id field) joins it only while the batch is open: checked for
-- every task before anything is written.
local i = 6
for _ = 1, n do
  local first, last = i + 7, i + 6 + tonumber(ARGV[i + 6])
  local batch = field_value(ARGV, first, last, 'batch_id')
  if batch then
    local state = redis.pcall('HGET', KEYS[1] .. ':batches:' .. batch, 'state')
    if state ~= 'open' then
      return refuse('BATCHCLOSED batch ' .. batch .. (type(state) == 'string' and (' is ' .. state) or
                    ' is not open (no such batch)'))
    end
  end
  i = last + 1
end
-- A tenant's tasks (their `tenant` field, lib/tenants.lua) wait in its backlog, whose depth is
-- bounded by the tenant's max_len (its own, else every tenant's default; none: no bound):
-- checked for every tenant of the call before anything is written. A tenant refused refuses
-- the call, as a full queue does; the queue's max_len does not count the backlogs.
-- (A delayed task is counted when it enters the backlog, not here: it may then be over.)
local adding = {}  -- tenant -> its immediate tasks in this call
i = 6
for _ = 1, n do
  local first, last = i + 7, i + 6 + tonumber(ARGV[i + 6])
  local immediate = tonumber(ARGV[i]) > 0 and ARGV[i + 1] == '0' and ARGV[i + 2] == '0'
  local tenant = immediate and field_value(ARGV, first, last, TENANT_FIELD)
  if tenant then adding[tenant] = (adding[tenant] or 0) + 1 end
  i = last + 1
end
for tenant, k in pairs(adding) do
  local limit = tenant_max_len(KEYS[1], tenant)
  if limit then
    local len = tenant_depth(KEYS[1], tenant)
    if len + k > limit then
      return refuse('QUEUEFULL ' .. KEYS[1] .. ' tenant ' .. tenant .. ' holds ' .. len .. ' tasks; adding ' .. k ..
                    ' would exceed its max_len ' .. limit)
    end
  end
end
local now = nil
local children = {}  -- parent id -> its children's ids, in order (a flow)
local elsewhere = {}  -- parent id -> its children in other queues, with each one's queue
i = 6
for _ = 1, n do
  local place = tonumber(ARGV[i])
  local dest, at, delay, lock = KEYS[math.abs(place)], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]),
                                tonumber(ARGV[i + 3])
  local first, last = i + 7, i + 6 + tonumber(ARGV[i + 6])
  local due = 0
  if at > 0 or delay > 0 then
    now = now or now_ms()
    due = at > 0 and at or now + delay
    if due <= now then due = 0 end
  end
  local parent = field_value(ARGV, first, last, 'flow_parent')
  if parent and not field_value(ARGV, first, last, 'flow_home') then
    redis.call('SADD', KEYS[1] .. ':flow:' .. parent .. ':pending', ARGV[first + 1])
    children[parent] = children[parent] or {}
    table.insert(children[parent], ARGV[first + 1])
  end
  if place == 0 then
    -- a stub: placed in its own partition, or queue (see above)
    local queue = field_value(ARGV, first, last, 'flow_queue')
    if queue then
      local id = ARGV[first + 1]
      elsewhere[parent] = (elsewhere[parent] or '') .. #id .. ':' .. id .. #queue .. ':' .. queue
      -- (In the flow's hash too, for flow_apply.lua's check: it goes with the flow.)
      redis.call('HSET', KEYS[1] .. ':flow:' .. parent, 'queue:' .. id, queue)
    end
  elseif place < 0 then
    redis.call('HSET', KEYS[1] .. ':flow:' .. ARGV[first + 1], 'body', cmsgpack.pack({dest, unpack(ARGV, first, last)}))
  elseif due > 0 then
    redis.call('ZADD', KEYS[4], due, delayed_member(ARGV[i + 5], dest, ARGV, first, last))
  elseif not trim or field_value(ARGV, first, last, TENANT_FIELD) then
    enter_stream(KEYS[1], dest, ARGV, first, last)
  else
    redis.call('XADD', dest, 'MAXLEN', '~', max_len, '*', unpack(ARGV, first, last))
  end
  if lock > 0 then redis.call('SET', KEYS[lock], ARGV[first + 1], 'PX', ARGV[i + 4]) end
  if place ~= 0 then
    -- (One reading of the clock per call: a record's enqueued_at is the now its due time is from.)
    now = now or now_ms()
    record_new(KEYS[1], ARGV, first, last, place < 0 and 'waiting' or (due > 0 and 'delayed' or 'queued'), due, now)
  end
  local batch = field_value(ARGV, first, last, 'batch_id')
  if batch and redis.call('SADD', KEYS[1] .. ':batches:' .. batch .. ':pending', ARGV[first + 1]) == 1 then
    redis.call('HINCRBY', KEYS[1] .. ':batches:' .. batch, 'total', 1)  -- (a task enqueued again counts once)
  end
  i = last + 1
end
-- A parent's children: in its flow (packed), and in its record, `<length>:<id>` each
-- (TaskRecord::children, Inspector::flow).
for parent, ids in pairs(children) do
  redis.call('HSET', KEYS[1] .. ':flow:' .. parent, 'order', cmsgpack.pack(ids))
  local listed = {}
  for k, id in ipairs(ids) do listed[k] = #id .. ':' .. id end
  redis.pcall('HSET', KEYS[1] .. ':task:' .. parent, 'flow_children', table.concat(listed))
  if elsewhere[parent] then
    redis.pcall('HSET', KEYS[1] .. ':task:' .. parent, 'flow_queues', elsewhere[parent])
  else
    redis.pcall('HDEL', KEYS[1] .. ':task:' .. parent, 'flow_queues')  -- (a parent's id used before)
  end
end
local k = tonumber(ARGV[i] or '0')
if k > 0 then
  local at = ms_text(now_ms())
  for p = 0, k - 1 do
    local to, token, call = ARGV[i + 3 * p + 1], ARGV[i + 3 * p + 2], ARGV[i + 3 * p + 3]
    redis.call('HSET', KEYS[1] .. ':flows:placing', token, #at .. ':' .. at .. #to .. ':' .. to .. #call .. ':' .. call)
  end
end
-- The guard is the last write: a placement that failed half-way is tried again (a child it
-- wrote may then run twice, as after a kill), never left unmade.
if placed then redis.call('SET', KEYS[5], '1', 'PX', PLACED_KEEP) end
return written()
