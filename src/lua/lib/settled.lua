-- lib/settled.lua: the mark of a task whose provisional record (orphan.lua) was made its fate.
--
-- settle_orphans.lua ends the task of a provisional record whose note expired: its holder is
-- taken for gone. A holder that was only cut off from the server for claim_min_idle comes back
-- and completes the task; that late completion (done.lua, replace.lua) must settle nothing a
-- second time. The mark is a key of its own beside the note, <note>:settled = the record's id
-- (see keys.hpp), because the holder's renewals of the note must not touch it.
--
-- mark_settled(note, record): the task of `record` (the id of the entry's provisional record,
-- its note `note`) ended from that record.
-- is_settled(note, record): whether it did.

-- How long a task stays marked: a holder back after longer than a day writes its task's fate
-- all the same (replace.lua).
local SETTLED_MS = 86400000

local function mark_settled(note, record)
  redis.call('SET', note .. ':settled', record, 'PX', SETTLED_MS)
end

local function is_settled(note, record)
  return redis.call('GET', note .. ':settled') == record
end
