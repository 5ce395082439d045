-- Complete a partition: remove it from the active layer and append it to the archive queue,
-- atomically. A second call finds the `done` bit and appends nothing.
-- While archival is paused (KEYS[7] exists) the partition stays in the active hash, status
-- completed (as the original architecture kept it; a Go record as Go writes a completion), its
-- pid goes into KEYS[8], and nothing is queued: release_held.lua queues it on resume.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] counts hash   KEYS[4] done bitmap
-- KEYS[5] archive queue stream   KEYS[6] the SDK's completion latency hash
-- KEYS[7] the archival pause switch (a string, present while paused)
-- KEYS[8] pids completed while paused (zset, score = completion ms)
-- KEYS[9] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] pid   ARGV[2] worker_id   ARGV[3] expected version ('' = any)   ARGV[4] now (unix ms)
-- ARGV[5] now as RFC 3339 JSON text
-- ARGV[6] the caller's completion latencies since its previous call, 'bucket:count,...;sum_us'
--         ('' for none), added to KEYS[6] when the call completes the partition (the caller keeps
--         them for its next call otherwise); skipped, not an error, if that hash was tampered with
-- Returns {'ok', archived JSON, stream entry id} | {'held', the record as kept} | {'already'}
-- | {'err', code, detail}.
--
-- The queue entry of a native record is the archived form (pid, range, worker, completed_at,
-- duration = completion - claim); that of a Go record is the whole record as Go archives it
-- (status completed, updated_at now, version and heartbeat unchanged).
-- Redis does not roll a script back when a command fails, so every key's type is checked
-- before the first write, and XADD, the write most likely to be refused (a full server),
-- comes first: a failure leaves no trace.
-- include: _checks.lua, _record.lua
local bad_type = wrong_type({'hash', 'zset', 'hash', 'string', 'stream', 'hash', 'string', 'zset', 'hash'})
bad_type = bad_type or corrupt_counts(KEYS[3])
if bad_type then
  return bad_type
end
-- the latency fields this call adds to, read and checked before the first write
local latency_fields, latency_values = {}, {}
local pairs_text, sum_us = string.match(ARGV[6], '^([%d:,]+);(%d+)$')
if pairs_text then
  for bucket, count in string.gmatch(pairs_text, '(%d+):(%d+)') do
    latency_fields[#latency_fields + 1] = 'b' .. bucket
    latency_values[#latency_values + 1] = count
  end
  latency_fields[#latency_fields + 1] = 'sum_us'
  latency_values[#latency_values + 1] = sum_us
  for _, value in ipairs(redis.call('HMGET', KEYS[6], unpack(latency_fields))) do
    if value and not string.match(value, '^%d+$') then
      latency_fields = {}
      break
    end
  end
end
local function add_latency()
  for i, field in ipairs(latency_fields) do
    redis.call('HINCRBY', KEYS[6], field, latency_values[i])
  end
end

local pid = ARGV[1]
local done = redis.call('GETBIT', KEYS[4], pid) == 1
if done and redis.call('HEXISTS', KEYS[1], pid) == 0 then
  return {'already'}
end
local rec, err = load_owned(KEYS[1], pid, ARGV[2], ARGV[3])
if not rec then
  if done and err[2] == 'bad_state' and err[3] == 'completed' then
    return {'already'}  -- completed while archival was paused: kept in the active hash
  end
  return err
end
local completed_at = math.floor(tonumber(ARGV[4]) / 1000)
local status = rec.status
set(rec, 'status', '"completed"')
set(rec, 'updated_at', rec.fmt == 'native' and string.format('%d', completed_at) or ARGV[5])
if redis.call('EXISTS', KEYS[7]) == 1 then
  local kept = encode_record(rec)
  redis.call('HSET', KEYS[1], pid, kept)
  redis.call('ZREM', KEYS[2], pid)
  redis.call('HINCRBY', KEYS[3], status, -1)
  go_stats_move(KEYS[9], status, 'completed')
  redis.call('SETBIT', KEYS[4], pid, 1)
  redis.call('ZADD', KEYS[8], ARGV[4], pid)
  add_latency()
  return {'held', kept}
end
local archived
if rec.fmt == 'native' then
  archived = native_archived(rec, completed_at)
else
  archived = encode_record(rec)
end
local id = redis.call('XADD', KEYS[5], '*', 'p', archived)
redis.call('HDEL', KEYS[1], pid)
redis.call('ZREM', KEYS[2], pid)
redis.call('HINCRBY', KEYS[3], status, -1)
go_stats_move(KEYS[9], status, 'completed')
redis.call('SETBIT', KEYS[4], pid, 1)
add_latency()
return {'ok', archived, id}
