-- lib/delayed.lua: the members of a queue's delayed set (<stream>:delayed, score = due time
-- in ms since the Unix epoch, by the server's clock).
-- A member is a MessagePack array of strings, packed by the cmsgpack library built into
-- Redis' Lua: the format tag 'sq1', a nonce (so two equal tasks stay two members), the stream
-- the task goes to when due, then the task's field and value strings. Binary-safe, and
-- decoded in C: the forwarder's pass is several times faster than with a parser in Lua.

-- delayed_member(nonce, dest, strings, first, last): the member of the task whose fields are
-- strings[first..last].
local function delayed_member(nonce, dest, strings, first, last)
  local parts = {'sq1', nonce, dest}
  for i = first, last do parts[#parts + 1] = strings[i] end
  return cmsgpack.pack(parts)
end

-- The one value a protected cmsgpack.unpack returned, or nil when it failed or found more
-- than one object (bytes after the array).
local function only_value(ok, value, ...)
  if ok and select('#', ...) == 0 then return value end
  return nil
end

-- packed_strings(bytes): the array of strings `bytes` packs, or nil when it is not one: not
-- MessagePack, not one array, not all strings (a MessagePack nil leaves a hole that maxn
-- finds). The one decoder of both packings of a task: a delayed member, and a tenant's backlog
-- element (the task's fields alone, lib/tenants.lua).
local function packed_strings(bytes)
  local t = only_value(pcall(cmsgpack.unpack, bytes))
  if type(t) ~= 'table' then return nil end
  local n = #t
  if table.maxn(t) ~= n then return nil end
  for i = 1, n do
    if type(t[i]) ~= 'string' then return nil end
  end
  return t
end

-- delayed_parts(member): a table {'sq1', nonce, dest, field, value, ...}, or nil when the
-- member is not in this format (someone else's ZADD): not an array of strings
-- (packed_strings), or an odd number of fields.
local function delayed_parts(member)
  local t = packed_strings(member)
  if not t or t[1] ~= 'sq1' then return nil end
  local n = #t
  if n < 3 or (n - 3) % 2 ~= 0 then return nil end
  return t
end
