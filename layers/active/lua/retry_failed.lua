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
local retry, gone = retries_of(KEYS[1], pids, {s = ARGV[1], elk = ARGV[2]})
for _, pid in ipairs(gone) do
  redis.call('ZREM', KEYS[2], pid)
end
write_retries(KEYS[1], KEYS[2], KEYS[3], retry)
for _, item in ipairs(retry) do
  redis.call('HDEL', KEYS[4], item[1])
end
if #retry > 0 and KEYS[5] then
  redis.call('HINCRBY', KEYS[5], 'failed', -#retry)
  redis.call('HINCRBY', KEYS[5], 'pending', #retry)
end
return {#retry, #pids}
