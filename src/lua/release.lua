-- release: the uniqueness locks (EnqueueOptions::unique_for) of tasks that succeeded.
-- KEYS[1..n] = the locks (<stream>:unique:<unique_key>, unique_lock_key() in keys.hpp),
-- ARGV[1..n] = the task id each lock must still hold to be deleted.
-- Returns how many locks were deleted.
-- Sent inside the MULTI that acknowledges and deletes those tasks' entries (see append_acks
-- in src/consumer/completer.cpp), so the lock goes with the ack. One script: GET and DEL
-- must not interleave, or a lock that expired and was taken by a newer task (which holds it
-- now) would be deleted. GET through pcall: a key of another type under that name is left
-- alone, and never fails the block.
-- @include lib/fields.lua
-- @include lib/unique.lua
local released = 0
for i, key in ipairs(KEYS) do
  if unique_release_lock(key, ARGV[i]) then released = released + 1 end
end
return released
