-- group: creates the consumer group at 0 (with the stream, MKSTREAM) on each level stream of a
-- queue (or partition) unless one of them has another group. streamq supports one group per
-- queue: a success deletes its entry (XACK + XDEL), so a second group would never see the
-- tasks the first finished, and what it held would become body_lost dead letters.
-- KEYS = the level streams (high, normal, low: one hash tag)
-- ARGV[1] = the group, ARGV[2] = 'create' | 'check' (look only: a consumer start checks every
--           partition before it creates anything)
-- Returns {'ok'} (every level checked; created, or there already), {'other', name, stream}
-- (another group exists: nothing is created), or {'unchecked', error} (the user may not run
-- XINFO GROUPS: created, or there already, without the check).
-- One script: two consumers of different groups starting at once must not both find the
-- streams without groups and both create theirs, and a refused start creates nothing.
-- An ACL refusal inside a script: Redis 7 words it "ERR The user executing the script can't
-- run this command ...", 6.2 "NOPERM ...", Valkey 8 "ERR ACL failure in script: User ... has no
-- permissions to run the '...' command". Returned as NOPERM in every case.
local function as_refusal(err)
  if string.find(err, 'NOPERM', 1, true) then return err end
  if string.find(err, "can't run this command", 1, true) or string.find(err, 'ACL failure in script', 1, true) then
    return 'NOPERM ' .. string.gsub(err, '^ERR ', '')
  end
  return nil
end
local unchecked = nil
local missing = {}
for _, stream in ipairs(KEYS) do
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if type(groups) == 'table' and groups.err then
    -- No such key: no groups. Refused: a user without XINFO GROUPS (the check is skipped).
    unchecked = unchecked or as_refusal(groups.err)
    if not unchecked and not string.find(groups.err, 'no such key', 1, true) then
      return redis.error_reply(groups.err)
    end
    groups = {}
  end
  local ours = false
  for _, g in ipairs(groups) do
    local name
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] end
    end
    if name ~= ARGV[1] then return {'other', name, stream} end
    ours = true
  end
  if not ours then missing[#missing + 1] = stream end
end
if ARGV[2] == 'create' then
  for _, stream in ipairs(missing) do
    -- Unchecked, the group may exist: BUSYGROUP is fine then. Any other refusal (OOM on a full
    -- server, NOPERM) is raised as it is, so the caller sees the server's own error.
    local created = redis.pcall('XGROUP', 'CREATE', stream, ARGV[1], '0', 'MKSTREAM')
    if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP', 1, true) then
      local refusal = as_refusal(created.err)
      if refusal then return redis.error_reply(refusal) end
      redis.call('XGROUP', 'CREATE', stream, ARGV[1], '0', 'MKSTREAM')
    end
  end
end
if unchecked then return {'unchecked', unchecked} end
return {'ok'}
