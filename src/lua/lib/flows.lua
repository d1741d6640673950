-- lib/flows.lua: flows (Producer::enqueue_flow): what a child's first final state settles in its
-- parent. A script including this file includes lib/clock.lua, lib/fields.lua, lib/events.lua,
-- lib/record.lua and lib/unique.lua before it, and lib/batches.lua and lib/settle.lua after it.
-- Input: flow_settled(queue, id, key, fields, first, last, state), called by lib/settle.lua for
--   a tracked task's first final state (done, dead or cancelled): `key` is its record's,
--   fields[first..last] its fields; flow_child_ended(queue, parent, id, state, policy, result,
--   err) for an end carried from another partition or queue (flow_apply.lua).
-- Output: the parent's flow keys and record (below); a released parent's entry in its stream;
--   an end of a child in another partition or queue in its own partition's outbox.

-- task_end: a task's end, through which a parent's own release, end or failure goes too
-- (defined in lib/settle.lua, which the script includes after this file).
local task_end

-- Flows (Producer::enqueue_flow). A parent task waits, unrun, until every child finished; its
-- record says `waiting`. The flow of parent P is kept in P's queue (so in P's slot):
--   <queue>:flow:P           hash: body (P's stream, then its fields: a MessagePack array,
--                            written by enqueue.lua), order (its children's ids as enqueued, packed)
--   <queue>:flow:P:pending   set: the children not finished yet
--   <queue>:flow:P:results   hash: per finished child, 'd' .. its result (done), or 'x' .. its
--                            state .. ' ' .. its error (a failure that does not fail P)
-- A child carries flow_parent (P) and flow_on_failure: 'fail' (P ends dead, reason
-- child_failed; the child stays pending, so its replay resumes the flow), 'ignore' (P runs, and
-- reads the failure) or 'remove' (P runs without it). Every change is made by the script that
-- writes the child's final state, and only while the child is pending: the script whose SREM
-- leaves the set empty enqueues P, and the body, deleted then, is enqueued once.

-- flow_children(flow): the finished children, in the order enqueued, as P's `flow_children`
-- field: per child `<length>:<id><length>:<outcome>` (outcome as in the results hash).
local function flow_children(flow)
  local order = cmsgpack.unpack(redis.call('HGET', flow, 'order') or cmsgpack.pack({}))
  local results = redis.call('HGETALL', flow .. ':results')
  local by_id = {}
  for i = 1, #results, 2 do by_id[results[i]] = results[i + 1] end
  local parts = {}
  for _, id in ipairs(order) do
    local r = by_id[id]
    if r then parts[#parts + 1] = #id .. ':' .. id .. #r .. ':' .. r end
  end
  return table.concat(parts)
end

-- flow_release(queue, parent): the last child of `parent` finished: the parent goes to its
-- stream with its children's outcomes, its record says queued, and its flow's keys go. A group
-- (its task_type GROUP_TYPE, see group() in streamq/producer.hpp) is not run: its record says
-- done at once, its children's outcomes its result. Nothing when the body is gone (released
-- already) or the parent was cancelled meanwhile.
local GROUP_TYPE = 'streamq:group'
local function flow_release(queue, parent)
  local flow = queue .. ':flow:' .. parent
  local body = redis.call('HGET', flow, 'body')
  if not body then return end
  local key = queue .. ':task:' .. parent
  local parts = nil
  local children = nil
  if state_of(key) ~= 'cancelled' then
    parts = cmsgpack.unpack(body)
    children = flow_children(flow)
  end
  redis.call('DEL', flow, flow .. ':pending', flow .. ':results')
  if not parts then return end
  redis.pcall('HDEL', key, 'error', 'reason', 'finished_at')
  redis.pcall('PERSIST', key)
  if field_value(parts, 2, #parts, 'task_type') == GROUP_TYPE then
    -- (A group that ended dead and resumes goes through waiting: its end is then a first
    -- final state again, which its own parent learns.)
    redis.pcall('HSET', key, 'state', 'waiting')
    task_end(queue, parts, 2, nil, 'done', 'done', {result = children})
    return
  end
  parts[#parts + 1] = 'flow_children'
  parts[#parts + 1] = children
  task_end(queue, parts, 2, nil, 'queued', 'released')
  enter_stream(queue, parts[1], parts, 2, #parts)  -- (after its end: see lib/fate.lua's retry)
end

-- flow_keep(queue, parent): the flow of a parent that ended dead lives as long as its record:
-- its keys take the record's TTL, or go with it (a retention of 0, or expired).
local function flow_keep(queue, parent)
  local flow = queue .. ':flow:' .. parent
  local ttl = redis.call('PTTL', queue .. ':task:' .. parent)
  if ttl == -2 then
    redis.call('DEL', flow, flow .. ':pending', flow .. ':results')
  elseif ttl > 0 then
    for _, k in ipairs({flow, flow .. ':pending', flow .. ':results'}) do redis.call('PEXPIRE', k, ttl) end
  end
end

-- flow_fail(queue, parent, child, err): a child whose failure fails its parent: the waiting
-- parent ends dead (reason child_failed), which its own parent learns in turn, and its flow's
-- keys live as long as its record (flow_keep). The body stays: a replayed child that succeeds
-- resumes it. (A unique parent keeps its lock, to expire on its own: the flow may resume.)
local function flow_fail(queue, parent, child, err)
  local key = queue .. ':task:' .. parent
  if state_of(key) ~= 'waiting' then return end
  local flow = queue .. ':flow:' .. parent
  local body = redis.call('HGET', flow, 'body')
  if not body then return end
  local parts = cmsgpack.unpack(body)
  task_end(queue, parts, 2, nil, 'dead', 'dead',
           {pairs = {'error', 'child ' .. child .. ' failed: ' .. err, 'reason', 'child_failed'}, keep_lock = true})
  flow_keep(queue, parent)
end

-- flow_child_ended(queue, parent, id, state, policy, result, err): child `id` of `parent` (in
-- this queue) ended `state` (done, dead or cancelled) for the first time, with its result
-- (done) or error: applied once, while the child is pending (a stale or repeated word of the
-- same end finds it gone, and changes nothing).
local function flow_child_ended(queue, parent, id, state, policy, result, err)
  local flow = queue .. ':flow:' .. parent
  local pending = flow .. ':pending'
  if redis.call('SISMEMBER', pending, id) == 0 then return end
  if state == 'done' then
    redis.call('HSET', flow .. ':results', id, 'd' .. result)
  elseif policy == 'ignore' then
    redis.call('HSET', flow .. ':results', id, 'x' .. state .. ' ' .. err)
  elseif policy ~= 'remove' then
    if state_of(queue .. ':task:' .. parent) == 'waiting' then
      event_add(queue, 'child_ended', parent, ms_text(now_ms()), 'child', id, 'state', state, 'pending',
                tostring(redis.call('SCARD', pending)))
    end
    flow_fail(queue, parent, id, err)
    return
  end
  redis.call('SREM', pending, id)
  local left = redis.call('SCARD', pending)
  event_add(queue, 'child_ended', parent, ms_text(now_ms()), 'child', id, 'state', state, 'pending', tostring(left))
  if left == 0 then
    flow_release(queue, parent)
  elseif state_of(queue .. ':task:' .. parent) == 'dead' then
    flow_keep(queue, parent)  -- (a key written now, the results hash, lives no longer than the rest)
  end
end

-- Flows across partitions (Producer::enqueue_flow on a partitioned queue): every parent lives
-- in the root's partition (its "home"), a child without children in its own. Such a child
-- carries flow_home (the home's stream). Its end cannot be applied by its own script (another
-- slot, on Cluster another master): it is recorded in its partition's outbox, the stream
-- <queue>:flows:outbox, and the consumers' courier (src/consumer/flow_courier.cpp) carries it
-- home with flow_apply.lua (which calls flow_child_ended), then deletes it: carried at least
-- once, applied once. The home's placements of such children go the other way
-- (<queue>:flows:placing, see enqueue.lua).
local function flow_settled(queue, id, key, fields, first, last, state)
  local parent = field_value(fields, first, last, 'flow_parent')
  if not parent then return end
  local home = field_value(fields, first, last, 'flow_home')
  if home == queue then home = nil end
  if not home and redis.call('SISMEMBER', queue .. ':flow:' .. parent .. ':pending', id) == 0 then return end
  local outcome = redis.call('HMGET', key, 'result', 'error', 'reason')
  local policy = field_value(fields, first, last, 'flow_on_failure') or 'fail'
  local err = state
  if state == 'dead' then err = outcome[2] or outcome[3] or state end
  if home then
    redis.call('XADD', queue .. ':flows:outbox', '*', 'kind', 'settle', 'to', home, 'parent', parent, 'child', id,
               'state', state, 'policy', policy, 'result', outcome[1] or '', 'error', err)
  else
    flow_child_ended(queue, parent, id, state, policy, outcome[1] or '', err)
  end
end
