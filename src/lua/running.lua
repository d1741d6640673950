-- running: handlers started tracked tasks (their fields hold `retention`, lib/record.lua): each
-- record says running, by which worker, from when, and counts the attempt; a 'started' event
-- says so (track_start). The completer sends the marks of the tasks its handlers started, many
-- in one call, ahead of their completions (which therefore never precede them); a mark whose
-- completion is in hand goes with it in the done script instead.
-- KEYS[1] = stream (the entries' priority level)
-- ARGV[1] = group, ARGV[2] = consumer, ARGV[3] = queue (the queue's stream), ARGV[4] = n,
-- then per entry: its id, its delivery count (with the id, it names the attempt: a mark sent
-- again after a lost reply is not counted twice), m (the number of field strings), then the m
-- strings (the task's fields: task_id, task_type, retention).
-- Returns per entry the attempt's number, or 0 when nothing was written for it: the entry is
-- not this consumer's (any more), or its record is final (a stale start must not undo what a
-- newer owner wrote). Each entry is checked on its own.
-- One script: each owner check and its write must not interleave with a new owner's.
-- @include lib/owner.lua
-- @include lib/clock.lua
-- @include lib/fields.lua
-- @include lib/events.lua
-- @include lib/record.lua
local group, me, queue = ARGV[1], ARGV[2], ARGV[3]
local out, now, i = {}, ms_text(now_ms()), 5
for e = 1, tonumber(ARGV[4]) do
  local entry, first, last = ARGV[i], i + 3, i + 2 + tonumber(ARGV[i + 2])
  out[e] = 0
  if pending_owner(KEYS[1], group, entry) == me then
    out[e] = record_start(queue, ARGV, first, last, me, now, entry .. ' ' .. ARGV[i + 1])
  end
  i = last + 1
end
return out
