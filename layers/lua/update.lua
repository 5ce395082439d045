-- Owner-side transition of one partition: start, heartbeat or fail.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] failed zset   KEYS[4] counts hash
-- KEYS[5] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] op ('start' | 'heartbeat' | 'fail')   ARGV[2] pid   ARGV[3] worker_id
-- ARGV[4] expected version ('' = any)   ARGV[5] now (unix ms)   ARGV[6] now (unix s)
-- ARGV[7] now as RFC 3339 JSON text   ARGV[8] error as JSON text (fail)
-- Returns {'ok', record JSON} or {'err', code, current status or version}.
-- A Go record that fails gets `error` and `options.error` and a zero heartbeat, as Go's
-- settled failure has; everything is read and checked before the first write.
-- include: _checks.lua, _record.lua
local bad_type = wrong_type({'hash', 'zset', 'zset', 'hash', 'hash'})
bad_type = bad_type or corrupt_counts(KEYS[4])
if bad_type then
  return bad_type
end
local op, pid = ARGV[1], ARGV[2]
if op ~= 'start' and op ~= 'heartbeat' and op ~= 'fail' then
  return {'err', 'bad_op', op}
end
local rec, err = load_owned(KEYS[1], pid, ARGV[3], ARGV[4])
if not rec then
  return err
end
if op == 'start' and rec.status ~= 'claimed' then
  return {'err', 'bad_state', rec.status}
end
local now_ms = tonumber(ARGV[5])
local now = now_text(rec, {s = ARGV[6], elk = ARGV[7]})
local old_status = rec.status
local options
if op == 'fail' and rec.fmt == 'elk' then
  options = with_option(rec.raw.options, 'error', ARGV[8])
  if not options then
    return {'err', 'corrupt', ''}
  end
end
bump_version(rec)
set(rec, 'updated_at', now)
if op == 'start' then
  set(rec, 'status', '"running"')
  set(rec, 'last_heartbeat', now)
  redis.call('ZADD', KEYS[2], now_ms, pid)
elseif op == 'heartbeat' then
  set(rec, 'last_heartbeat', now)
  redis.call('ZADD', KEYS[2], now_ms, pid)
else
  set(rec, 'status', '"failed"')
  set(rec, 'error', ARGV[8])
  if rec.fmt == 'elk' then
    set(rec, 'options', options)
    set(rec, 'last_heartbeat', ZERO_TIME)
  end
  redis.call('ZREM', KEYS[2], pid)
  redis.call('ZADD', KEYS[3], tonumber(pid), pid)
end
local new_status = json_text(rec.raw.status)
if old_status ~= new_status then
  redis.call('HINCRBY', KEYS[4], old_status, -1)
  redis.call('HINCRBY', KEYS[4], new_status, 1)
  go_stats_move(KEYS[5], old_status, new_status)
end
local out = encode_record(rec)
redis.call('HSET', KEYS[1], pid, out)
return {'ok', out}
