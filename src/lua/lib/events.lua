-- lib/events.lua: the events of tracked tasks (EnqueueOptions::retention), the capped stream
-- <queue>:events that Producer::wait, `streamq events` and the dashboard follow.
-- Input: event_add(queue, event, id, now, ...): the queue's stream (the key's prefix, which
--   shares the queue's hash tag, so it is in the script's slot), the event's name, the task id,
--   `now` (ms text, the server's clock), then the event's own field/value strings (passed on as
--   they are: no table is built for them).
-- Output: one entry (event, task_id, at, then those strings), XADD MAXLEN ~ EVENTS_MAX. Nothing
--   else: a key of another type under that name fails nothing (no event, nothing else lost).

local EVENTS_MAX = '10000' -- <queue>:events keeps about this many

local function event_add(queue, event, id, now, ...)
  redis.pcall('XADD', queue .. ':events', 'MAXLEN', '~', EVENTS_MAX, '*', 'event', event, 'task_id', id, 'at', now, ...)
end
