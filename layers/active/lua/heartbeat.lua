-- The holder's heartbeat on its claimed or running partition: the record's heartbeat is now.
-- KEYS[1] active hash
-- ARGV[1] pid   ARGV[2] worker_id as JSON text   ARGV[3] now (unix s)
-- ARGV[4] now as RFC 3339 JSON text (needed for a Go record: '' or absent otherwise)
-- ARGV[5] expected version ('' or absent = any)
-- ARGV[6] the record as the caller's last step on it answered ('' or absent: not known), so a
--         record still as it was is not checked whole again (`native_at`)
-- Returns the record JSON | {'upgrade'} (the record is in neither layout of `_layout.lua`)
-- | {'elk_time'} (a Go record, and no ARGV[4]) | {'err', code, detail}; nothing is written
-- unless it answers the record.
-- The leases index is left alone: claim.lua checks a lease that looks stale against the record.
-- include: _checks.lua, _heartbeat.lua
local pid, worker, expected = ARGV[1], ARGV[2], ARGV[5] or ''
local raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
if err then
  return err
end
if not raw then
  return {'err', 'not_found', ''}
end
local out, refused = renewed(raw, worker, expected, ARGV[3], ARGV[4], ARGV[6])
if not out then
  return refused
end
redis.call('HSET', KEYS[1], pid, out)
return out
