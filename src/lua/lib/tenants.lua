-- lib/tenants.lua: fair queues per tenant (docs/tenants.md). A task whose fields name a
-- tenant (its `streamq_tenant` field) waits in the tenant's backlog, not in its queue's stream, until a turn of its tenant
-- moves it there (tenants_dispatch.lua, many turns ahead of each read; or a wake-up below);
-- while it runs it holds a slot of its tenant, and every end of its attempt gives it back.
-- Keys, under the queue's stream q: q:tenant:<t>[:p:high|:p:low] (the backlogs, lists of
-- tasks, each a MessagePack array of its fields, the oldest first),
-- q:tenants:ready (tenants that may run, by pass), q:tenants:waiting (tenants that may not run
-- yet, by when to look again: '+inf' while paused), q:tenants:slots:<t> (a hash: task id ->
-- '<lease end ms> <level> <entry id>'), q:tenants:rate:<t> (its starts of the last window),
-- q:tenants:config:<t> and q:tenants:defaults (settings, hashes), q:tenants:pass (the pass of
-- the last turn), q:tenants:worker (the lease and group the consumers last dispatched with).
-- A script including this file includes lib/clock.lua and lib/fields.lua before it.
-- Input:
--   enter_stream(queue, dest, fields, first, last): the one way a task enters a level stream of
--     queue `queue` (dest: the queue's stream, or its ':p:high' or ':p:low' level) after its
--     enqueue: a task of a tenant goes to the tenant's backlog of that level instead, and its
--     tenant is woken (below). Returns the new entry's id, or 'tenant:<t>' for a task that
--     waits in its tenant's backlog (it has no entry yet).
--   tenant_released(queue, fields, first, last): the attempt of the task whose fields these are
--     ended (lib/settle.lua's task_end): its slot is given back, and its tenant, if it waited
--     for a slot, is woken.
--   tenant_settings(queue, tenant, defaults): {weight, concurrency, rate, per, max_len, paused},
--     numbers, each the tenant's own else every tenant's default else 1 for the weight, 0 (none)
--     for the others; `defaults`: tenant_defaults(queue) when the caller has it, else nil.
--   tenant_max_len(queue, tenant): its max_len, nil for none; tenant_depth(queue, tenant): the
--     tasks in its backlog.
--   tenant_emptied(queue, tenant): a task left tenant `tenant`'s backlog other than by its turn
--     (cancel_waiting.lua): when none is left, the tenant leaves the ready and waiting sets, as
--     its turn would find (a paused tenant, waiting at '+inf', has no turn to find it).
--   tenant_turns(queue, t, pass, bound, most, now, lease, group, settings): the turns of ready
--     tenant `t`, its pass `pass`, while its pass stays below `bound` (the next ready tenant's)
--     and fewer than `most` tasks moved. In a turn it waits (paused; at its concurrency limit;
--     at its rate limit), or moves its oldest task of its most important level into the queue's
--     stream of that level with a slot (lease: ms until the slot is looked at; group: its
--     consumer group), its pass growing by 1/weight (stride scheduling); it goes back into the
--     ready set at its next pass while it has more. Returns the tasks moved and the pass of its
--     last turn; the caller keeps that pass (q:tenants:pass) when any moved.
-- Waking a tenant: one that is neither ready nor waiting (its first task since its backlog
-- emptied) enters the ready set at the virtual time (the last turn's pass): an idle tenant saves
-- no credit, a new one waits behind no one. Two cases take that turn at once, so that the task
-- enters the stream now, where a blocked worker sees it, instead of at some worker's next
-- dispatch (workers that saw tenants dispatch at least every 50 ms), provided a consumer has
-- dispatched before (q:tenants:worker: the slot's lease and group): a task of a tenant of which
-- nothing runs or waits, not paused and without a rate limit, goes straight to the stream (the
-- producer's user needs no more than it has: no backlog read, no set emptied); and a tenant that
-- waited for a slot gets its turn when a task's end frees one.
-- A slot whose lease ended is dropped only once its entry is neither in its stream nor pending in
-- the group (the end of it went some other way): a task dispatched but not read yet keeps its
-- slot however long it waits, and a worker killed with -9 keeps its tasks' slots until another
-- worker has taken its entries over and ended them, so a tenant's limit holds across the
-- takeover; and a slot is never a counter that can leak.

local TENANT_FIELD = 'streamq_tenant'  -- a task's tenant (EnqueueOptions::tenant)
local TENANT_LEVELS = {':p:high', '', ':p:low'}  -- a backlog's levels, the most important first
local TENANT_SETTINGS = {'weight', 'concurrency', 'rate', 'per', 'max_len', 'paused'}
local TENANT_STRIDE = 1000000  -- a pass's step at weight 1

local function tenant_defaults(queue)
  return redis.call('HMGET', queue .. ':tenants:defaults', unpack(TENANT_SETTINGS))
end

local function settings_of(own, default)
  local out = {}
  for k, name in ipairs(TENANT_SETTINGS) do
    out[name] = tonumber(own[k] or default[k]) or (name == 'weight' and 1 or 0)
  end
  return out
end

-- (A tenant without settings of its own shares the table of the defaults' settings, made once
-- per `defaults`: callers only read it.)
local function tenant_settings(queue, tenant, defaults)
  local own = redis.call('HMGET', queue .. ':tenants:config:' .. tenant, unpack(TENANT_SETTINGS))
  local default = defaults or tenant_defaults(queue)
  for k = 1, #TENANT_SETTINGS do
    if own[k] then return settings_of(own, default) end
  end
  default.settings = default.settings or settings_of({}, default)
  return default.settings
end

local function tenant_max_len(queue, tenant)
  local limit = tenant_settings(queue, tenant).max_len
  if limit > 0 then return limit end
  return nil
end

local function tenant_depth(queue, tenant)
  local base, len = queue .. ':tenant:' .. tenant, 0
  for _, level in ipairs(TENANT_LEVELS) do len = len + redis.call('LLEN', base .. level) end
  return len
end

local function tenant_emptied(queue, tenant)
  if not tenant or tenant == '' or tenant_depth(queue, tenant) > 0 then return end
  redis.call('ZREM', queue .. ':tenants:ready', tenant)
  redis.call('ZREM', queue .. ':tenants:waiting', tenant)
end

-- The slots still held; those whose lease ended are kept (with a new lease) while their entry
-- is in its stream (not read yet, or held: streamq deletes a finished entry) or pending (held,
-- its body deleted by hand while its handler runs), else dropped. Returns the count and the
-- earliest lease end.
local function tenant_slots_held(queue, slots, now, lease, group)
  local all = redis.call('HGETALL', slots)
  local held, earliest = 0, nil
  for k = 1, #all, 2 do
    local ends, level, entry = string.match(all[k + 1], '^(%d+) (%d) (%S+)$')
    ends = tonumber(ends)
    if ends and ends <= now then
      local stream = queue .. TENANT_LEVELS[tonumber(level)]
      local pending = redis.pcall('XPENDING', stream, group, entry, entry, 1)
      if #redis.call('XRANGE', stream, entry, entry) > 0 or
         (type(pending) == 'table' and not pending.err and #pending > 0) then
        ends = now + lease
        redis.call('HSET', slots, all[k], ends .. ' ' .. level .. ' ' .. entry)
      else
        ends = nil
        redis.call('HDEL', slots, all[k])
      end
    end
    if ends then
      held = held + 1
      if not earliest or ends < earliest then earliest = ends end
    end
  end
  return held, earliest
end

-- nil when tenant `t` may start a task now, else when to look at it again (ms, or '+inf').
local function tenant_must_wait(queue, t, c, now, lease, group)
  if c.paused ~= 0 then return '+inf' end
  if c.concurrency > 0 then
    local slots = queue .. ':tenants:slots:' .. t
    if redis.call('HLEN', slots) >= c.concurrency then
      local held, earliest = tenant_slots_held(queue, slots, now, lease, group)
      if held >= c.concurrency then return earliest end
    end
  end
  if c.rate > 0 and c.per > 0 then
    local window = queue .. ':tenants:rate:' .. t
    redis.call('ZREMRANGEBYSCORE', window, '-inf', now - c.per)
    if redis.call('ZCARD', window) >= c.rate then
      return tonumber(redis.call('ZRANGE', window, 0, 0, 'WITHSCORES')[2]) + c.per
    end
  end
  return nil
end

-- Moves the oldest task of `t`'s most important level, from level `from` down (a run of turns
-- knows the levels above are empty), into the queue's stream of that level, with its slot
-- (`stamp`: its lease end and a space). Returns that level, or nil when its backlog was empty
-- (a list that empties is gone).
local function tenant_move_one(queue, t, c, now, stamp, from)
  local base = queue .. ':tenant:' .. t
  for level = from, #TENANT_LEVELS do
    local suffix = TENANT_LEVELS[level]
    local packed = redis.call('LPOP', base .. suffix)
    if packed then
      local fields = cmsgpack.unpack(packed)
      local id = redis.call('XADD', queue .. suffix, '*', unpack(fields))
      local task_id = field_value(fields, 1, nil, 'task_id') or id
      redis.call('HSET', queue .. ':tenants:slots:' .. t, task_id, stamp .. level .. ' ' .. id)
      if c.rate > 0 and c.per > 0 then
        local window = queue .. ':tenants:rate:' .. t
        redis.call('ZADD', window, now, now .. '/' .. level .. '/' .. id)
        redis.call('PEXPIRE', window, c.per)
      end
      return level
    end
  end
  return nil
end

-- Whether `t`'s backlog has a task at level `from` or below.
local function tenant_has_more(queue, t, from)
  local base = queue .. ':tenant:' .. t
  for level = from, #TENANT_LEVELS do
    if redis.call('EXISTS', base .. TENANT_LEVELS[level]) == 1 then return true end
  end
  return false
end

local function tenant_turns(queue, t, pass, bound, most, now, lease, group, c)
  local ready = queue .. ':tenants:ready'
  local step = TENANT_STRIDE / math.max(c.weight, 0.001)
  local stamp = (now + lease) .. ' '
  local moved, level, last = 0, 1, nil
  while true do
    local wait = tenant_must_wait(queue, t, c, now, lease, group)
    if wait then
      redis.call('ZREM', ready, t)
      -- (After a move in this run its backlog may be empty: then it waits for nothing.)
      if moved == 0 or tenant_has_more(queue, t, level) then
        redis.call('ZADD', queue .. ':tenants:waiting', wait, t)
      end
      return moved, last
    end
    local from = tenant_move_one(queue, t, c, now, stamp, level)
    if not from then
      redis.call('ZREM', ready, t)  -- (its backlog emptied in this run, or was deleted by hand)
      return moved, last
    end
    moved, level, last = moved + 1, from, pass
    pass = pass + step
    if moved >= most or pass >= bound then
      if tenant_has_more(queue, t, level) then
        redis.call('ZADD', ready, pass, t)
      else
        redis.call('ZREM', ready, t)
      end
      return moved, last
    end
  end
end

-- The consumers' lease and group (what their last dispatch said), or nil before any dispatch.
local function tenant_worker(queue)
  local worker = redis.call('HMGET', queue .. ':tenants:worker', 'lease', 'group')
  if not worker[1] or not worker[2] then return nil end
  return tonumber(worker[1]), worker[2]
end

local function enter_stream(queue, dest, fields, first, last)
  local tenant = field_value(fields, first, last, TENANT_FIELD)
  if not tenant or tenant == '' then return redis.call('XADD', dest, '*', unpack(fields, first, last)) end
  local ready, slots = queue .. ':tenants:ready', queue .. ':tenants:slots:' .. tenant
  local idle = not redis.call('ZSCORE', ready, tenant) and
               not redis.call('ZSCORE', queue .. ':tenants:waiting', tenant)
  if idle and redis.call('EXISTS', slots) == 0 then
    local lease = tenant_worker(queue)
    local c = lease and tenant_settings(queue, tenant)
    if c and c.paused == 0 and c.rate == 0 then
      -- Its turn at once: nothing of it runs, nothing of it waits.
      local id = redis.call('XADD', dest, '*', unpack(fields, first, last))
      local level = dest == queue .. ':p:high' and 1 or (dest == queue .. ':p:low' and 3 or 2)
      redis.call('HSET', slots, field_value(fields, first, last, 'task_id') or id,
                 (now_ms() + lease) .. ' ' .. level .. ' ' .. id)
      return id
    end
  end
  redis.call('RPUSH', queue .. ':tenant:' .. tenant .. string.sub(dest, #queue + 1),
             cmsgpack.pack({unpack(fields, first, last)}))
  if idle then redis.call('ZADD', ready, redis.call('GET', queue .. ':tenants:pass') or 0, tenant) end
  return 'tenant:' .. tenant
end

local function tenant_released(queue, fields, first, last)
  local tenant, id = field_pair(fields, first, last, TENANT_FIELD, 'task_id')
  if not tenant or tenant == '' or not id then return end
  if redis.call('HDEL', queue .. ':tenants:slots:' .. tenant, id) == 0 then return end
  local waiting = queue .. ':tenants:waiting'
  local due = redis.call('ZSCORE', waiting, tenant)
  if due and due ~= 'inf' then
    -- It waited for this slot: its turn now, at the virtual time.
    redis.call('ZREM', waiting, tenant)
    local lease, group = tenant_worker(queue)
    local pass = redis.call('GET', queue .. ':tenants:pass') or 0
    redis.call('ZADD', queue .. ':tenants:ready', pass, tenant)
    if lease then
      tenant_turns(queue, tenant, tonumber(pass), math.huge, 1, now_ms(), lease, group, tenant_settings(queue, tenant))
    end
  end
end
