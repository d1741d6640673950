-- fetch_pending: take pending entries to run. Reclaims stalled ones from any consumer
-- ("auto"), or replays this consumer's own (after a start or a reconnect: "own").
-- KEYS[1] = stream, KEYS[2] = dead-letter stream
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = mode ("auto" | "own"),
-- ARGV[4] = cursor: the last entry id examined ("0-0" to begin), ARGV[5] = most entries to
-- take, ARGV[6] = min idle ms (auto), ARGV[7] = max deliveries, ARGV[8] = failed_at text for
-- dead-letter entries, ARGV[9] = most fields a dead-letter entry keeps, ARGV[10] = the queue's
-- stream name (dead-lettered unique tasks release <queue>:unique:<key>, see lib/fate.lua),
-- ARGV[11..] = ids this consumer holds now (never handed out again).
-- Returns {next cursor ("0-0" = the end was reached), {{id, {fields}, deliveries}, ...},
-- dead-lettered count, cancelled count}.
-- An entry an operator cancelled while nobody ran it (its cancel request <stream>:cancel:<id>
-- exists, see cancel.lua: its holder died, or released it at a stop) is not handed out: it ends
-- cancelled here, as the done script ends a cancelled task (acknowledged and deleted, its unique
-- lock released, its record and event `cancelled`, the request deleted).
--
-- "auto" examines at most 100 pending entries per call (XPENDING with a cursor) and acts only
-- on those idle for min idle or longer, whose worker is presumed dead. XAUTOCLAIM is not
-- used: on Redis 7 it removes every deleted entry it meets from the PEL, idle or not, so it
-- would dead-letter an entry whose live holder is about to run it (and 6.2 reports deleted
-- ids differently again).
-- Claims use JUSTID, which leaves the delivery counter alone: the counter is raised by
-- start.lua only when a handler really starts the entry, so the entries a crashed worker had
-- merely prefetched are not charged for its crash; only the ones it was running are.
-- One script: entries whose body is gone (trimmed or XDELed) and entries already started max
-- deliveries times (their handler may crash the worker) go to the dead-letter stream here,
-- atomically with their removal from the PEL, so neither can vanish between two commands.
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/tenants.lua
-- @include lib/delayed.lua
-- @include lib/events.lua
-- @include lib/record.lua
-- @include lib/unique.lua
-- @include lib/flows.lua
-- @include lib/batches.lua
-- @include lib/settle.lua
-- @include lib/cancelled.lua
-- @include lib/fate.lua
local stream, dlq, group, me, mode = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local want, min_idle, max_deliveries = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local failed_at, max_fields, queue = ARGV[8], tonumber(ARGV[9]), ARGV[10]
local held = {}
for i = 11, #ARGV do held[ARGV[i]] = true end
local dead, cancelled = 0, 0
local function cancel(id, fields)
  end_cancelled(stream, group, id, queue, fields, 1)
  cancelled = cancelled + 1
end
local function bury(id, fields, reason, err)
  dead_letter(dlq, fields, 1, max_fields, reason, err, failed_at, id, me, queue)
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
  dead = dead + 1
end

local start = ARGV[4] == '0-0' and '-' or ('(' .. ARGV[4])
local scan = mode == 'auto' and 100 or want
local p
if mode == 'auto' then
  p = redis.call('XPENDING', stream, group, start, '+', scan)
else
  p = redis.call('XPENDING', stream, group, start, '+', scan, me)
end
local cursor = #p < scan and '0-0' or p[#p][1]
local run = {}
for i, item in ipairs(p) do
  local id, n = item[1], item[4]
  if not held[id] and (mode == 'own' or item[3] >= min_idle) then
    local body = redis.call('XRANGE', stream, id, id)
    if #body == 0 then
      bury(id, {}, 'body_lost', 'body lost: the entry was trimmed or deleted before it was done')
    elseif redis.call('EXISTS', stream .. ':cancel:' .. id) == 1 then
      cancel(id, body[1][2])
    elseif n >= max_deliveries then
      bury(id, body[1][2], 'max_deliveries', 'started ' .. n .. ' times (limit ' ..
        max_deliveries .. ') without finishing; its worker may have died running it')
    else
      -- auto: take it over; own: reset its idle time, it is queued here now
      redis.call('XCLAIM', stream, group, me, mode == 'auto' and min_idle or 0, id, 'JUSTID')
      run[#run + 1] = {id, body[1][2], n}
      if #run >= want then
        if i < #p then cursor = id end
        break
      end
    end
  end
end
return {cursor, run, dead, cancelled}
