-- Put failed partitions back to pending (at most ARGV[3] per call; the caller loops). The
-- error is cleared (and, in a Go record, options.error and the heartbeat), and so are the failures
-- a retry policy counted (a partition retried by hand gets its attempts again).
-- KEYS[1] active hash   KEYS[2] failed zset   KEYS[3] pending zset   KEYS[4] attempts hash
-- KEYS[5] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] now (unix s)  ARGV[2] now as RFC 3339 JSON text   ARGV[3] limit
-- Returns {moved, looked at}: every record is read and checked before the first write; a
-- corrupt one stays where it is, an index entry whose record moved on is dropped.
-- include: _checks.lua, _retry.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'zset', 'hash', 'hash'})
if bad_type then
  return bad_type
end
local pids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[3]) - 1)
local clock = {s = ARGV[1], elk = ARGV[2]}
local retry, gone = {}, {}
for _, pid in ipairs(pids) do
  local out, why = retried_record(KEYS[1], pid, clock)
  if out then
    retry[#retry + 1] = {pid, out}
  elseif why == 'gone' then
    gone[#gone + 1] = pid
  end
end
for _, pid in ipairs(gone) do
  redis.call('ZREM', KEYS[2], pid)
end
for _, item in ipairs(retry) do
  local pid = item[1]
  redis.call('HSET', KEYS[1], pid, item[2])
  redis.call('ZREM', KEYS[2], pid)
  redis.call('ZADD', KEYS[3], tonumber(pid), pid)
  redis.call('HDEL', KEYS[4], pid)
end
if #retry > 0 and KEYS[5] then
  redis.call('HINCRBY', KEYS[5], 'failed', -#retry)
  redis.call('HINCRBY', KEYS[5], 'pending', #retry)
end
return {#retry, #pids}
