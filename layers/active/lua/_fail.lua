-- The failure of fail.lua (its header says what it takes and answers), a function so that finish.lua
-- fails a partition the same way: KEYS and ARGV as fail.lua's. Included by the scripts that name
-- this file in their '-- include:' line (layers/plumbing/scripts.py); not a script of its own.
-- include: _checks.lua, _record.lua, _gostats.lua

local function fail_partition(KEYS, ARGV)
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
end
