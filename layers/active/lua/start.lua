-- The holder starts work on its claimed partition: status running.
-- KEYS[1] active hash   KEYS[2] leases zset
-- KEYS[3] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] pid   ARGV[2] worker_id as JSON text   ARGV[3] now (unix s)
-- ARGV[4] the lease's score once running: minus now (unix ms)
-- ARGV[5] now as RFC 3339 JSON text (needed for a Go record: '' or absent otherwise)
-- ARGV[6] expected version ('' or absent = any)
-- ARGV[7] the record as the caller's last step on it answered ('' or absent: not known), so a
--         record still as it was is not checked whole again (`native_at`)
-- Returns the record JSON | {'upgrade'} (the record is in neither layout of `_layout.lua`)
-- | {'elk_time'} (a Go record, and no ARGV[5]) | {'err', code, detail}; nothing is written
-- unless it answers the record.
-- The lease's score turns negative (running, `KeySchema.leases`). It is the first write, so a
-- leases key of the wrong type is refused before anything is written.
-- include: _checks.lua, _layout.lua, _gostats.lua
local pid, worker, expected = ARGV[1], ARGV[2], ARGV[6] or ''
local raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
if err then
  return err
end
if not raw then
  return {'err', 'not_found', ''}
end

-- a native record as a start finds it
local version, rest = native_at(raw, native_head('claimed', worker), ARGV[7])
if rest and (expected == '' or tonumber(expected) == version) and not KEYS[3] then
  err = select(2, typed_call('zset', 'ZADD', KEYS[2], ARGV[4], pid))
  if err then
    return err
  end
  local now = ARGV[3]
  local out = native_head('running', worker) .. string.format('%d', version + 1) .. ',"updated_at":' .. now .. ',"last_heartbeat":' .. now
    .. string.sub(raw, rest)
  redis.call('HSET', KEYS[1], pid, out)
  return out
end

-- any other record: a Go record, or one that is not the caller's to start
local rec, refused = held_layout(raw, worker, expected, true)
if not rec then
  return refused
end
local now = rec.fmt == 'elk' and (ARGV[5] or '') or ARGV[3]
if now == '' then
  return {'elk_time'}
end
local plan
plan, err = go_stats_read(KEYS[3], 'claimed', 'running')
if not plan then
  return err
end
err = select(2, typed_call('zset', 'ZADD', KEYS[2], ARGV[4], pid))
if err then
  return err
end
local out = spliced(raw, rec, 'running', worker, now, now)
go_stats_write(plan)
redis.call('HSET', KEYS[1], pid, out)
return out
