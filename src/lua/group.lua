-- group: creates the consumer group at 0 (with the stream, MKSTREAM) unless the stream has
-- another group. streamq supports one group per queue: a success deletes its entry (XACK +
-- XDEL), so a second group would never see the tasks the first finished, and what it held
-- would become body_lost dead letters.
-- KEYS[1] = stream (one priority level of the queue)
-- ARGV[1] = the group
-- Returns {'ok'} (created, or there already), {'other', name} (another group exists: nothing
-- is created), or {'unchecked', error} (the user may not run XINFO GROUPS: created, or there
-- already, without the check).
-- One script: two consumers of different groups starting at once must not both find the
-- stream without groups and both create theirs.
-- An ACL refusal inside a script: Redis 7 words it "ERR The user executing the script can't
-- run this command ...", 6.2 "NOPERM ...". Returned as NOPERM either way.
local function as_refusal(err)
  if string.find(err, 'NOPERM', 1, true) then return err end
  if string.find(err, "can't run this command", 1, true) then return 'NOPERM ' .. string.gsub(err, '^ERR ', '') end
  return nil
end
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
local unchecked = nil
if type(groups) == 'table' and groups.err then
  -- No such key: no groups. Refused: a user without XINFO GROUPS (the check is skipped).
  unchecked = as_refusal(groups.err)
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
  if name ~= ARGV[1] then return {'other', name} end
  ours = true
end
if not ours then
  -- Unchecked, the group may exist: BUSYGROUP is fine then. Any other refusal (OOM on a full
  -- server, NOPERM) is raised as it is, so the caller sees the server's own error.
  local created = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
  if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP', 1, true) then
    local refusal = as_refusal(created.err)
    if refusal then return redis.error_reply(refusal) end
    redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
  end
end
if unchecked then return {'unchecked', unchecked} end
return {'ok'}
