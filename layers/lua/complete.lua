-- Complete a partition: remove it from the active layer and append it to the archive queue,
-- atomically. A second call finds the `done` bit and appends nothing.
-- While archival is paused (KEYS[5] exists) the partition stays in the active hash, status
-- completed (as the original architecture kept it; a Go record as Go writes a completion), its
-- pid goes into KEYS[6], and nothing is queued: release_held.lua queues it on resume.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] done bitmap   KEYS[4] archive queue stream
-- KEYS[5] the archival pause switch (a string, present while paused)
-- KEYS[6] pids completed while paused (zset, score = completion ms): needed while paused
-- KEYS[7] the SDK's completion latency hash: needed when ARGV[7] hands latencies
-- KEYS[8] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- (a key needed, and every one before it, is passed; the others may be left out)
-- ARGV[1] pid   ARGV[2] worker_id as JSON text   ARGV[3] now (unix s)
-- ARGV[4] now as RFC 3339 JSON text (needed for a Go record)   ARGV[5] expected version
-- ARGV[6] now (unix ms, needed while paused)
-- ARGV[7] the caller's completion latencies since it last handed them, 'bucket:count,...;sum_us',
--         added to KEYS[7] when the call completes the partition (the caller keeps them for a
--         later call otherwise); skipped, not an error, if that hash was tampered with
-- (an argument left out, or '', is not given)
-- Returns '<stream entry id> <archived JSON>' | {'held', the record as kept} | {'already'}
-- | {'upgrade'} (the record is in neither layout of `_layout.lua`) | {'paused'} (KEYS[6] or
-- ARGV[6] missing while paused) | {'elk_time'} (a Go record, and no ARGV[4])
-- | {'err', code, detail}. Nothing is written unless it answers a completion or 'held'.
-- The queue entry of a native record is the archived form (pid, range, worker, completed_at,
-- duration = completion - claim); that of a Go record is the whole record as Go archives it
-- (status completed, updated_at now, version and heartbeat unchanged).
-- The record is read and checked first; the writes are `write_completion`'s (_completion.lua),
-- each undone when a later one is refused for its key's type.
-- include: _checks.lua, _layout.lua, _gostats.lua, _completion.lua
local pid, worker, expected, now = ARGV[1], ARGV[2], ARGV[5] or '', ARGV[3]
local raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
if err then
  return err
end

-- a native record as a completion finds it, archival running and no latencies to hand
local version, at = native_at(raw or '', native_head('running', worker), ',"claimed_at":')
if not at then
  version, at = native_at(raw or '', native_head('claimed', worker), ',"claimed_at":')
end
if at and (expected == '' or tonumber(expected) == version) and not KEYS[7] and redis.call('EXISTS', KEYS[5]) == 0 then
  local comma = string.find(raw, ',', at + 14, true)
  local entry = native_entry(raw, comma + 1, worker, string.sub(raw, at + 14, comma - 1), now)
  local id
  id, err = write_completion(KEYS, pid, entry)
  if not id then
    return err
  end
  return id .. ' ' .. entry
end

-- any other case: a Go record, archival paused, latencies to hand, an error to name
if not raw or not at then
  local bit, refused = typed_call('string', 'GETBIT', KEYS[3], pid)
  if refused then
    return refused
  end
  if not raw then
    return bit == 1 and {'already'} or {'err', 'not_found', ''}
  end
  local status = string.match(raw, '"status":"(%l+)"')
  if status == 'completed' and bit == 1 then
    return {'already'}  -- completed while archival was paused: kept in the active hash
  end
end
local rec, refused = held_layout(raw, worker, expected, false)
if not rec then
  return refused
end
if rec.fmt == 'elk' then
  now = ARGV[4] or ''
  if now == '' then
    return {'elk_time'}
  end
end

-- the latency fields this call adds to, read and checked before the first write
local latency_fields, latency_values = {}, {}
local pairs_text, sum_us
if KEYS[7] and (ARGV[7] or '') ~= '' then
  pairs_text, sum_us = string.match(ARGV[7], '^([%d:,]+);(%d+)$')
end
if pairs_text then
  for bucket, count in string.gmatch(pairs_text, '(%d+):(%d+)') do
    latency_fields[#latency_fields + 1] = 'b' .. bucket
    latency_values[#latency_values + 1] = count
  end
  latency_fields[#latency_fields + 1] = 'sum_us'
  latency_values[#latency_values + 1] = sum_us
  local stored, refused = typed_call('hash', 'HMGET', KEYS[7], unpack(latency_fields))
  if refused then
    return refused
  end
  for _, value in ipairs(stored) do
    if value and not string.match(value, '^%d+$') then
      latency_fields = {}
      break
    end
  end
end
local plan
plan, err = go_stats_read(KEYS[8], rec.status, 'completed')
if not plan then
  return err
end

-- the record as kept while archival is paused, and as a Go record's queue entry
local kept
if rec.fmt == 'native' then
  kept = native_record(raw, rec.at, 'completed', worker, string.format('%d', rec.version), now, rec.heartbeat,
    rec.claimed_at)
else
  kept = string.sub(raw, 1, rec.w_end) .. ',"last_heartbeat":' .. rec.heartbeat
    .. ',"status":"completed","updated_at":' .. now .. ',' .. string.sub(raw, rec.mid)
end
local held_key, entry = nil, kept
if redis.call('EXISTS', KEYS[5]) == 1 then
  held_key = KEYS[6]
  if not held_key or (ARGV[6] or '') == '' then
    return {'paused'}
  end
  local refused = select(2, typed_call('zset', 'ZSCORE', held_key, pid))
  if refused then
    return refused
  end
elseif rec.fmt == 'native' then
  entry = native_entry(raw, rec.at, worker, rec.claimed_at, now)
end
local id
id, err = write_completion(KEYS, pid, entry, held_key, ARGV[6])
if not id then
  return err
end
for i, field in ipairs(latency_fields) do
  redis.call('HINCRBY', KEYS[7], field, latency_values[i])
end
go_stats_write(plan)
if held_key then
  return {'held', entry}
end
return id .. ' ' .. entry
