-- Put failed partitions back to pending (at most ARGV[2] per call; the caller loops).
-- KEYS[1] active hash   KEYS[2] failed zset   KEYS[3] pending zset   KEYS[4] counts hash
-- ARGV[1] now (unix s)  ARGV[2] limit
-- Returns the number of partitions moved.
local pids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
local moved = 0
for _, pid in ipairs(pids) do
  redis.call('ZREM', KEYS[2], pid)
  local raw = redis.call('HGET', KEYS[1], pid)
  if raw then
    local rec = cjson.decode(raw)
    if rec.status == 'failed' then
      rec.status = 'pending'
      rec.worker_id = ''
      rec.version = rec.version + 1
      rec.updated_at = ARGV[1]
      redis.call('HSET', KEYS[1], pid, encode_record(rec, raw_options(raw)))
      redis.call('ZADD', KEYS[3], tonumber(pid), pid)
      moved = moved + 1
    end
  end
end
if moved > 0 then
  redis.call('HINCRBY', KEYS[4], 'failed', -moved)
  redis.call('HINCRBY', KEYS[4], 'pending', moved)
end
return moved
