-- Put failed partitions back to pending (at most ARGV[3] per call; the caller loops). The
-- error is cleared (and, in a Go record, options.error and the heartbeat).
-- KEYS[1] active hash   KEYS[2] failed zset   KEYS[3] pending zset
-- KEYS[4] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] now (unix s)  ARGV[2] now as RFC 3339 JSON text   ARGV[3] limit
-- Returns {moved, looked at}: every record is read and checked before the first write; a
-- corrupt one stays where it is, an index entry whose record moved on is dropped.
-- include: _checks.lua, _record.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'zset', 'hash'})
if bad_type then
  return bad_type
end
local pids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[3]) - 1)
local clock = {s = ARGV[1], elk = ARGV[2]}
local retry, gone = {}, {}
for _, pid in ipairs(pids) do
  local rec, why = load_record(KEYS[1], pid)
  if rec and rec.status == 'failed' then
    if rec.fmt == 'elk' then
      rec.options = with_option(rec.raw.options, 'error', nil)
    end
    if rec.fmt == 'native' or rec.options then
      retry[#retry + 1] = {pid, rec}
    end
  elseif rec or why == 'not_found' then
    gone[#gone + 1] = pid
  end
end
for _, pid in ipairs(gone) do
  redis.call('ZREM', KEYS[2], pid)
end
for _, item in ipairs(retry) do
  local pid, rec = item[1], item[2]
  set(rec, 'status', '"pending"')
  set(rec, 'worker_id', '""')
  set(rec, 'error', '""')
  bump_version(rec)
  set(rec, 'updated_at', now_text(rec, clock))
  if rec.fmt == 'elk' then
    set(rec, 'options', rec.options)
    set(rec, 'last_heartbeat', ZERO_TIME)
  end
  redis.call('HSET', KEYS[1], pid, encode_record(rec))
  redis.call('ZREM', KEYS[2], pid)
  redis.call('ZADD', KEYS[3], tonumber(pid), pid)
end
if #retry > 0 and KEYS[4] then
  redis.call('HINCRBY', KEYS[4], 'failed', -#retry)
  redis.call('HINCRBY', KEYS[4], 'pending', #retry)
end
return {#retry, #pids}
