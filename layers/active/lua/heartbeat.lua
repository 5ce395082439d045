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
-- include: _checks.lua, _layout.lua
local pid, worker, expected = ARGV[1], ARGV[2], ARGV[5] or ''
local raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
if err then
  return err
end
if not raw then
  return {'err', 'not_found', ''}
end

-- a native record as a heartbeat finds it: running, or claimed and not started yet
local head = native_head('running', worker)
local version, rest = native_at(raw, head, ARGV[6])
if not rest then
  head = native_head('claimed', worker)
  version, rest = native_at(raw, head, ARGV[6])
end
if rest and (expected == '' or tonumber(expected) == version) then
  local now = ARGV[3]
  local out = head .. string.format('%d', version + 1) .. ',"updated_at":' .. now .. ',"last_heartbeat":' .. now .. string.sub(raw, rest)
  redis.call('HSET', KEYS[1], pid, out)
  return out
end

-- any other record: a Go record, or one that is not the caller's
local rec, refused = held_layout(raw, worker, expected, false)
if not rec then
  return refused
end
local now = rec.fmt == 'elk' and (ARGV[4] or '') or ARGV[3]
if now == '' then
  return {'elk_time'}
end
local out = spliced(raw, rec, rec.status, worker, now, now)
redis.call('HSET', KEYS[1], pid, out)
return out
