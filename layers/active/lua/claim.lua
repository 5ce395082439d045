-- Claim a partition: first one whose lease went stale (so a dead worker's partition is taken
-- over within the lease timeout whatever is pending), else the lowest pending one.
-- KEYS[1] active hash   KEYS[2] pending zset   KEYS[3] leases zset
-- KEYS[4] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] worker_id as JSON text   ARGV[2] now (unix ms)   ARGV[3] now (unix s)
-- ARGV[4] a lease whose heartbeat is at most this (unix ms) is stale; '' = do not look for
--         stale leases this time (the SDK looks at most every so often, `ActiveCore._claim`)
-- ARGV[5] minus ARGV[4]
-- ARGV[6] now as RFC 3339 JSON text (needed for a Go record: '' or absent otherwise)
-- (Numbers come as the text Redis is sent: Lua would format a number it computes for a command.)
-- Returns the claimed record's JSON | {'none'} | {'upgrade', pid, ...}: the records of those pids
-- are in neither layout of `_layout.lua` (upgrade.lua rewrites them, or sets the unreadable ones
-- aside, out of every index) | {'elk_time'}: a Go record, and no ARGV[6]; nothing was written
-- unless it answers a record.
-- Looks at the first 20 stale leases and about the first 20 pending pids.
-- A lease's score is its heartbeat as the index last saw it, positive while claimed and negative
-- while running (`KeySchema.leases`). Heartbeats do not move it: a lease that looks stale here
-- is checked against its record, and its score corrected if the holder still beats. So are
-- index entries that no longer match their record (a Go worker moved it, or it is gone). Every
-- key written is read first, so a key of the wrong type is refused before any write; the one
-- exception is the lowest pending pid, popped to be claimed and put back when it is not.
-- include: _checks.lua, _layout.lua, _time.lua, _gostats.lua
local worker = ARGV[1]
local err

-- the lowest pending partition, a native record as claims find it
if ARGV[4] == '' and not KEYS[4] then
  local popped
  popped, err = typed_call('zset', 'ZPOPMIN', KEYS[2])
  if err then
    return err
  end
  if #popped == 0 then
    return {'none'}
  end
  local pid = popped[1]
  local raw
  raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
  local version, rest
  if raw then
    version, rest = native_at(raw, '{"status":"pending","worker_id":"","version":')
    rest = rest and string.find(raw, ',', rest + 1, true)  -- the comma before "partition_id"
  end
  if rest then
    local now = ARGV[3]
    local out = native_head('claimed', worker) .. string.format('%d', version + 1) .. ',"updated_at":' .. now .. ',"last_heartbeat":'
      .. now .. ',"claimed_at":' .. now .. string.sub(raw, rest)
    redis.call('HSET', KEYS[1], pid, out)
    redis.call('ZADD', KEYS[3], ARGV[2], pid)
    return out
  end
  redis.call('ZADD', KEYS[2], popped[2], pid)  -- not a pending native record: the general way
  if err then
    return err
  end
end

-- any other case: a stale lease, a Go record, an index entry out of step with its record
local stale, pending = {}, nil
if ARGV[4] ~= '' then
  stale, err = typed_call('zset', 'ZRANGEBYSCORE', KEYS[3], ARGV[5], ARGV[4], 'LIMIT', '0', '20')
  if err then
    return err
  end
end
local cutoff = tonumber(ARGV[4] ~= '' and ARGV[4] or '0')

-- the pids met whose records are in no layout: answered for upgrade.lua, before anything is claimed
local upgrade = {'upgrade'}

-- the record of pid and its layout, or nil and what to do with the index entry: 'drop' it,
-- 'upgrade' it (listed in `upgrade`), or the reply to return
local function candidate(pid)
  local raw, refused = typed_call('hash', 'HGET', KEYS[1], pid)
  if refused then
    return nil, refused
  end
  if not raw then
    return nil, 'drop'
  end
  local rec = layout_of(raw)
  if rec then
    rec.raw = raw
    return rec
  end
  upgrade[#upgrade + 1] = pid
  return nil, 'upgrade'
end

local function lease_score(rec)
  local beat = rec.fmt == 'elk' and (rfc3339_ms(rec.heartbeat) or 0) or tonumber(rec.heartbeat) * 1000
  return rec.status == 'running' and -beat or beat, beat
end

local chosen, chosen_pid, from_pending
for _, pid in ipairs(stale) do
  local rec, why = candidate(pid)
  if type(why) == 'table' then
    return why
  elseif why == 'drop' or (rec and rec.status ~= 'claimed' and rec.status ~= 'running') then
    redis.call('ZREM', KEYS[3], pid)
  elseif rec then
    local score, beat = lease_score(rec)
    if beat > cutoff then
      redis.call('ZADD', KEYS[3], score, pid)
    else
      chosen, chosen_pid = rec, pid
      break
    end
  end
end

local first, window = 0, 0
while not chosen and first <= 20 do
  pending, err = typed_call('zset', 'ZRANGE', KEYS[2], first, first + window)
  if err then
    return err
  end
  if #pending == 0 then
    break
  end
  local removed = 0
  for _, pid in ipairs(pending) do
    local rec, why = candidate(pid)
    if type(why) == 'table' then
      return why
    elseif why == 'drop' or (rec and rec.status ~= 'pending') then
      redis.call('ZREM', KEYS[2], pid)
      removed = removed + 1
      if rec and (rec.status == 'claimed' or rec.status == 'running') then
        redis.call('ZADD', KEYS[3], (lease_score(rec)), pid)
      end
    elseif rec then
      chosen, chosen_pid, from_pending = rec, pid, true
      break
    end
  end
  first, window = first + window + 1 - removed, 19
end
if #upgrade > 1 then
  return upgrade
end
if not chosen then
  return {'none'}
end

local plan
plan, err = go_stats_read(KEYS[4], chosen.status, 'claimed')
if not plan then
  return err
end
local now = chosen.fmt == 'elk' and (ARGV[6] or '') or ARGV[3]
if now == '' then
  return {'elk_time'}
end
local out = spliced(chosen.raw, chosen, 'claimed', worker, now, now, now)
redis.call('HSET', KEYS[1], chosen_pid, out)
if from_pending then
  redis.call('ZREM', KEYS[2], chosen_pid)
end
redis.call('ZADD', KEYS[3], ARGV[2], chosen_pid)
go_stats_write(plan)
return out
