-- enqueue: add a batch of tasks unless the backlog would exceed max_len.
-- KEYS[1] = stream, KEYS[2] (optional) = the batch's refusal mark (batch_refused_key() in
--           keys.hpp), passed by enqueue_batch when it sends more than one chunk
-- ARGV[1] = max_len, ARGV[2] = n (tasks), then per task: m (the number of field and value
--           strings) followed by the m strings.
-- Returns n, or the error "QUEUEFULL ..." with nothing written, or 0 with nothing written
-- when an earlier chunk of the same batch was refused. Callers know their tasks by task_id,
-- so the entry ids are not sent back (building that reply costs Redis ~10%).
-- One script: the length check and the writes must not interleave with other producers'.
-- streamq deletes finished entries, so XLEN is the unfinished backlog; adding only while it
-- stays <= max_len means no XADD here ever needs MAXLEN, so no unread task is ever trimmed.
-- The chunks of one batch are pipelined: a refused chunk sets the mark, so the chunks behind
-- it write nothing even if room appears (a smaller last chunk, a consumer's XDEL), and what
-- a batch wrote is always a prefix of it. The mark expires a minute after its last use.
local max_len = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIRE', KEYS[2], 60000)
  return 0
end
local len = redis.call('XLEN', KEYS[1])
if len + n > max_len then
  if KEYS[2] then redis.call('SET', KEYS[2], '1', 'PX', 60000) end
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
