-- The holder's failure of one partition: status failed with its error, out of the leases and
-- into the failed set.
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] failed zset
-- KEYS[4] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] pid   ARGV[2] worker_id   ARGV[3] expected version ('' = any)   ARGV[4] now (unix s)
-- ARGV[5] now as RFC 3339 JSON text   ARGV[6] error as JSON text
-- Returns {'ok', record JSON} or {'err', code, current status or version}.
-- A Go record that fails gets `error` and `options.error` and a zero heartbeat, as Go's
-- settled failure has; everything is read and checked before the first write.
-- include: _checks.lua, _record.lua, _gostats.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'zset'})
if bad_type then
  return bad_type
end
local pid = ARGV[1]
local rec, err = load_owned(KEYS[1], pid, ARGV[2], ARGV[3])
if not rec then
  return err
end
local options
if rec.fmt == 'elk' then
  options = with_option(rec.raw.options, 'error', ARGV[6])
  if not options then
    return {'err', 'corrupt', ''}
  end
end
local plan
plan, err = go_stats_read(KEYS[4], rec.status, 'failed')
if not plan then
  return err
end
bump_version(rec)
set(rec, 'updated_at', now_text(rec, {s = ARGV[4], elk = ARGV[5]}))
set(rec, 'status', '"failed"')
set(rec, 'error', ARGV[6])
if rec.fmt == 'elk' then
  set(rec, 'options', options)
  set(rec, 'last_heartbeat', ZERO_TIME)
end
local out = encode_record(rec)
redis.call('HSET', KEYS[1], pid, out)
redis.call('ZREM', KEYS[2], pid)
redis.call('ZADD', KEYS[3], tonumber(pid), pid)
go_stats_write(plan)
return {'ok', out}
