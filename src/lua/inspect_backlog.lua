-- inspect_backlog: one page of the tasks waiting in the backlogs of a queue's tenants, decoded
-- (for streamq::Inspector; docs/tenants.md).
-- KEYS[1] = the tenants' ready set (<q>:tenants:ready), KEYS[2] = their waiting set
-- ARGV[1] = the queue's stream q (a tenant t's backlogs are q:tenant:<t>, with ':p:high' and
--           ':p:low' for those levels)
-- ARGV[2] = the set to start in (1: ready, 2: waiting), ARGV[3] = the score of the tenant to
--           start at ('' for the first page), ARGV[4] = that tenant, ARGV[5] = its level to
--           start at (1 high, 2 normal, 3 low; 4: past its last), ARGV[6] = the index in that
--           level's list to start at
-- ARGV[7], ARGV[8] = the first and last level listed (1 to 3), ARGV[9] = most tasks to return,
-- ARGV[10] = most tenants to look at, ARGV[11] = '1' to return each element's bytes (what
--           cancel_waiting.lua takes), else ''
-- Returns {where, task...}: `where` is {set, score, tenant, level, index}, where the next page
-- starts (an empty array: this was the last page; a page cut by ARGV[10] may hold fewer tasks);
-- a task is {key, level, bytes or '', field, value, ...}, or {key, level, bytes or '',
-- 'element', bytes} for an element that is not an array of field and value strings.
-- Order: the tenants of the ready set, then those of the waiting set, each in its set's order;
-- a tenant's levels high to low, each oldest first. Read-only, O(tenants looked at + tasks).
-- A page continues at its tenant while it has the score it had (the rest of its level from
-- the index: tasks that left its head meanwhile shift it, so some may be skipped), else after
-- where the tenant stood (lib/ranks.lua: its turns moved it later in the ready set, or to the
-- waiting set; it may come again).
-- @include lib/delayed.lua
-- @include lib/ranks.lua
local LEVELS = {':p:high', '', ':p:low'}
local base = ARGV[1] .. ':tenant:'
local set, score, level, index = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[5]), tonumber(ARGV[6])
local lo, hi = tonumber(ARGV[7]), tonumber(ARGV[8])
local most, most_tenants, bytes = tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11] == '1'
local rank = 0
if score == '' then
  level, index = lo, 0
else
  local at = redis.call('ZSCORE', KEYS[set], ARGV[4])
  if at and tonumber(at) == tonumber(score) then
    rank = redis.call('ZRANK', KEYS[set], ARGV[4])
  else
    rank, level, index = rank_after(KEYS[set], score, ARGV[4]), lo, 0
  end
end

local out, n, looked = {{}}, 0, 0
while set <= 2 do
  local batch = redis.call('ZRANGE', KEYS[set], rank, rank + math.min(100, most_tenants - looked) - 1, 'WITHSCORES')
  if #batch == 0 then
    set, rank, level, index = set + 1, 0, lo, 0
  else
    for i = 1, #batch, 2 do
      local t = batch[i]
      looked = looked + 1
      for lv = math.max(level, lo), hi do
        local key = base .. t .. LEVELS[lv]
        local got = redis.call('LRANGE', key, index, index + most - n - 1)
        for _, element in ipairs(got) do
          local item = {key, lv, bytes and element or ''}
          local fields = packed_strings(element)
          if fields and #fields % 2 == 0 then
            for j = 1, #fields do item[3 + j] = fields[j] end
          else
            item[4], item[5] = 'element', element
          end
          out[#out + 1] = item
        end
        n = n + #got
        if n == most then
          out[1] = {set, batch[i + 1], t, lv, index + #got}
          return out
        end
        index = 0
      end
      level = lo
      if looked >= most_tenants then
        out[1] = {set, batch[i + 1], t, hi + 1, 0}
        return out
      end
    end
    rank = rank + #batch / 2
  end
end
return out
