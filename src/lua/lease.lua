-- lease: owner-checked lease renewal (heartbeat) or release of held entries.
-- KEYS[1] = stream
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = idle to set in ms ("0" renews the lease;
--           a large value releases the entries so any reclaimer takes them at once),
-- ARGV[4] = delivery count to set ("-1" keeps it; a release of never-started entries sets it
--           back to what it was before they were delivered), ARGV[5..] = entry ids.
-- Returns {lost, gone, cancel}: ids this consumer must not run or keep (owned by another
-- consumer, or no longer pending), ids still its own whose body was deleted, and ids still its
-- own that an operator cancelled (their cancel request `<stream>:cancel:<id>` exists, see
-- cancel.lua): their handlers are asked to stop.
-- One script: XCLAIM with min-idle 0 would steal an entry from its new owner, so the owner
-- check and the claim must not be separated. XCLAIM would also silently drop a pending id
-- whose entry was deleted (Redis 7), so gone ones are not claimed: the caller moves them to
-- the dead-letter stream with the fields it read (orphan.lua). JUSTID keeps the delivery
-- counter as it is.
-- @include lib/owner.lua
local owned, lost, gone, cancel = {}, {}, {}, {}
for i = 5, #ARGV do
  if pending_owner(KEYS[1], ARGV[1], ARGV[i]) ~= ARGV[2] then
    lost[#lost + 1] = ARGV[i]
  elseif #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 0 then
    gone[#gone + 1] = ARGV[i]
  else
    owned[#owned + 1] = ARGV[i]
    if ARGV[3] == '0' and redis.call('EXISTS', KEYS[1] .. ':cancel:' .. ARGV[i]) == 1 then
      cancel[#cancel + 1] = ARGV[i]
    end
  end
end
if #owned > 0 then
  local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
  for _, id in ipairs(owned) do args[#args + 1] = id end
  args[#args + 1] = 'IDLE'
  args[#args + 1] = ARGV[3]
  if ARGV[4] ~= '-1' then
    args[#args + 1] = 'RETRYCOUNT'
    args[#args + 1] = ARGV[4]
  end
  args[#args + 1] = 'JUSTID'
  redis.call(unpack(args))
end
return {lost, gone, cancel}
