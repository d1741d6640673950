-- lib/clock.lua: the server's clock, which every due time and rate window uses, so that
-- producers and workers with skewed clocks agree. (TIME before a write is allowed: scripts
-- replicate their effects, the default since Redis 5 and the only mode since 7.)

-- now_ms(): ms since the Unix epoch.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ms_text(ms): a number of milliseconds as the text redis.call is given (numbers handed to
-- redis.call are formatted with printf's %.17g, a tenth of a tracking script's time).
local function ms_text(ms)
  return string.format('%d', ms)
end
