-- lib/owner.lua: the owner check of move, orphan, lease and start.
-- pending_owner(stream, group, id) returns the consumer whose pending list holds the entry,
-- or nil when the entry is not pending (acked, deleted from the PEL, or never delivered).
-- XACK and XCLAIM do not check who holds an entry, so every owner-checked script asks first.
local function pending_owner(stream, group, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if #p == 0 then return nil end
  return p[1][2]
end
