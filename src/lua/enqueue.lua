-- enqueue: add a batch of tasks unless the backlog would exceed max_len.
-- KEYS[1] = stream
-- ARGV[1] = max_len, ARGV[2] = n (tasks), then per task: m (the number of field and value
--           strings) followed by the m strings.
-- Returns n, or the error "QUEUEFULL ..." with nothing written. Callers know their tasks by
-- task_id, so the entry ids are not sent back (building that reply costs Redis ~10%).
-- One script: the length check and the writes must not interleave with other producers'.
-- streamq deletes finished entries, so XLEN is the unfinished backlog; adding only while it
-- stays <= max_len means no XADD here ever needs MAXLEN, so no unread task is ever trimmed.
local max_len = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local len = redis.call('XLEN', KEYS[1])
if len + n > max_len then
  return redis.error_reply('QUEUEFULL ' .. KEYS[1] .. ' holds ' .. len ..
    ' unfinished tasks; adding ' .. n .. ' would exceed max_len ' .. max_len)
end
local i = 3
for t = 1, n do
  local m = tonumber(ARGV[i])
  redis.call('XADD', KEYS[1], '*', unpack(ARGV, i + 1, i + m))
  i = i + m + 1
end
return n
