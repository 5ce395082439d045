-- Claim the lowest pending partition, or take over one whose lease went stale.
-- KEYS[1] active hash   KEYS[2] pending zset   KEYS[3] leases zset   KEYS[4] counts hash
-- ARGV[1] worker_id     ARGV[2] now (unix ms)  ARGV[3] stale after (ms)
-- Returns {'none'} or {'ok', record JSON, previous holder or ''}.
local now_ms = tonumber(ARGV[2])
for _ = 1, 100 do
  local pid
  local popped = redis.call('ZPOPMIN', KEYS[2])
  if #popped > 0 then
    pid = popped[1]
  else
    local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms - tonumber(ARGV[3]), 'LIMIT', 0, 1)
    if #stale == 0 then
      return {'none'}
    end
    pid = stale[1]
  end
  local raw = redis.call('HGET', KEYS[1], pid)
  if raw then
    local rec = cjson.decode(raw)
    local previous = ''
    if is_leased(rec.status) then
      previous = rec.worker_id
    end
    redis.call('HINCRBY', KEYS[4], rec.status, -1)
    redis.call('HINCRBY', KEYS[4], 'claimed', 1)
    local now = math.floor(now_ms / 1000)
    rec.status = 'claimed'
    rec.worker_id = ARGV[1]
    rec.version = rec.version + 1
    rec.updated_at = now
    rec.last_heartbeat = now
    rec.claimed_at = now
    local out = encode_record(rec, raw_options(raw))
    redis.call('HSET', KEYS[1], pid, out)
    redis.call('ZADD', KEYS[3], now_ms, pid)
    return {'ok', out, previous}
  end
  -- an index entry without a record (should not happen): drop it and look again
  redis.call('ZREM', KEYS[2], pid)
  redis.call('ZREM', KEYS[3], pid)
end
return {'none'}
