-- lib/delayed.lua: the members of a queue's delayed set (<stream>:delayed, score = due time
-- in ms since the Unix epoch, by the server's clock).
-- A member is a run of length-prefixed strings, "<length>:<bytes>" each: the format tag
-- 'sq1', a nonce (so two equal tasks stay two members), the stream the task goes to when due,
-- then the task's field and value strings. Binary-safe, and read back without a JSON parser.

-- delayed_member(nonce, dest, strings, first, last): the member of the task whose fields are
-- strings[first..last].
local function delayed_member(nonce, dest, strings, first, last)
  local parts = {'3:sq1', #nonce .. ':' .. nonce, #dest .. ':' .. dest}
  for i = first, last do
    local s = strings[i]
    parts[#parts + 1] = #s .. ':' .. s
  end
  return table.concat(parts)
end

-- delayed_parts(member): a table {'sq1', nonce, dest, field, value, ...}, or nil when the
-- member is not in this format (someone else's ZADD).
local function delayed_parts(member)
  local out, pos, len = {}, 1, #member
  while pos <= len do
    local colon = string.find(member, ':', pos, true)
    if not colon then return nil end
    local n = tonumber(string.sub(member, pos, colon - 1))
    if not n or n < 0 or colon + n > len then return nil end
    out[#out + 1] = string.sub(member, colon + 1, colon + n)
    pos = colon + n + 1
  end
  if out[1] ~= 'sq1' or #out < 3 or (#out - 3) % 2 ~= 0 then return nil end
  return out
end
