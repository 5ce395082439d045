-- Owner-side transition of one partition: start, heartbeat or fail.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] failed zset   KEYS[4] counts hash
-- ARGV[1] op ('start' | 'heartbeat' | 'fail')   ARGV[2] pid   ARGV[3] worker_id
-- ARGV[4] expected version ('' = any)   ARGV[5] now (unix ms)   ARGV[6] error text (fail)
-- Returns {'ok', record JSON} or {'err', code, current status or version}.
local op, pid = ARGV[1], ARGV[2]
local raw, rec = load_owned(KEYS[1], pid, ARGV[3], ARGV[4])
if not raw then
  return rec
end
if op == 'start' and rec.status ~= 'claimed' then
  return {'err', 'bad_state', rec.status}
end
local now_ms = tonumber(ARGV[5])
local now = math.floor(now_ms / 1000)
local old_status = rec.status
rec.version = rec.version + 1
rec.updated_at = now
if op == 'start' then
  rec.status = 'running'
  rec.last_heartbeat = now
  redis.call('ZADD', KEYS[2], now_ms, pid)
elseif op == 'heartbeat' then
  rec.last_heartbeat = now
  redis.call('ZADD', KEYS[2], now_ms, pid)
elseif op == 'fail' then
  rec.status = 'failed'
  rec.error = ARGV[6]
  redis.call('ZREM', KEYS[2], pid)
  redis.call('ZADD', KEYS[3], tonumber(pid), pid)
else
  return redis.error_reply('unknown op ' .. op)
end
if old_status ~= rec.status then
  redis.call('HINCRBY', KEYS[4], old_status, -1)
  redis.call('HINCRBY', KEYS[4], rec.status, 1)
end
local out = encode_record(rec, raw_options(raw))
redis.call('HSET', KEYS[1], pid, out)
return {'ok', out}
