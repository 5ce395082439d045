-- Complete a partition: remove it from the active layer and append it to the archive queue,
-- atomically. A second call finds the `done` bit and appends nothing.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] counts hash   KEYS[4] done bitmap
-- KEYS[5] archive queue stream
-- ARGV[1] pid   ARGV[2] worker_id   ARGV[3] expected version ('' = any)   ARGV[4] now (unix ms)
-- Returns {'ok', archived JSON, stream entry id} | {'already'} | {'err', code, detail}.
--
-- Redis does not roll a script back when a command fails, so every key is read (which
-- checks its type) before the first write, and XADD, the write most likely to be refused
-- (a full server, a foreign key of the wrong type), comes first: a failure leaves no trace.
local pid = ARGV[1]
if redis.call('GETBIT', KEYS[4], pid) == 1 and redis.call('HEXISTS', KEYS[1], pid) == 0 then
  return {'already'}
end
local raw, rec = load_owned(KEYS[1], pid, ARGV[2], ARGV[3])
if not raw then
  return rec
end
local completed_at = math.floor(tonumber(ARGV[4]) / 1000)
local duration = math.max(0, completed_at - rec.claimed_at)
local archived = '{"partition_id":' .. int(rec.partition_id)
  .. ',"min_id":' .. int(rec.min_id)
  .. ',"max_id":' .. int(rec.max_id)
  .. ',"worker_id":' .. cjson.encode(rec.worker_id)
  .. ',"completed_at":' .. int(completed_at)
  .. ',"duration":' .. int(duration) .. '}'
redis.call('ZSCORE', KEYS[2], pid)
redis.call('HGET', KEYS[3], rec.status)
redis.call('XLEN', KEYS[5])
local id = redis.call('XADD', KEYS[5], '*', 'p', archived)
redis.call('HDEL', KEYS[1], pid)
redis.call('ZREM', KEYS[2], pid)
redis.call('HINCRBY', KEYS[3], rec.status, -1)
redis.call('SETBIT', KEYS[4], pid, 1)
return {'ok', archived, id}
