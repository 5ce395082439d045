-- Hand partitions back to pending at once: a worker that stops gives back what it did not finish,
-- rather than leaving it to be taken over when its lease times out (`layers/active/window.py`).
-- KEYS[1] active hash   KEYS[2] leases zset   KEYS[3] pending zset   KEYS[4] presence hash
-- KEYS[5] presence expiry zset
-- KEYS[6] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] worker_id   ARGV[2] now (unix s)   ARGV[3] now as RFC 3339 JSON text
-- ARGV[4] 'leave' to delete the worker's presence entry too, '' not to   ARGV[5..] pids
-- Returns {'ok', the pids handed back} | {'err', code, detail}. A pid the worker does not hold
-- (claimed or running) is passed over. The record becomes pending with no worker: a native one as
-- create.lua writes it (no heartbeat, no claim time), a Go record as Go's ReleasePartition leaves it
-- (a zero heartbeat); its version goes one up, updated_at is now. Everything is read and checked
-- before the first write.
-- include: _checks.lua, _record.lua, _gostats.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'zset', 'hash', 'zset'})
if bad_type then
  return bad_type
end
local worker = ARGV[1]
local clock = {s = ARGV[2], elk = ARGV[3]}
local back, plans = {}, {}
for i = 5, #ARGV do
  local pid = ARGV[i]
  local rec = load_owned(KEYS[1], pid, worker, '')
  if rec then
    if not plans[rec.status] then
      local plan, err = go_stats_read(KEYS[6], rec.status, 'pending')
      if not plan then
        return err
      end
      plans[rec.status] = plan
    end
    set(rec, 'worker_id', '""')
    bump_version(rec)
    set(rec, 'updated_at', now_text(rec, clock))
    if rec.fmt == 'elk' then
      set(rec, 'last_heartbeat', ZERO_TIME)
    else
      set(rec, 'last_heartbeat', '0')
      set(rec, 'claimed_at', '0')
    end
    back[#back + 1] = {pid, rec.status, rec}
    set(rec, 'status', '"pending"')
  end
end
local handed = {}
for _, item in ipairs(back) do
  local pid = item[1]
  redis.call('HSET', KEYS[1], pid, encode_record(item[3]))
  redis.call('ZREM', KEYS[2], pid)
  redis.call('ZADD', KEYS[3], tonumber(pid), pid)
  go_stats_write(plans[item[2]])
  handed[#handed + 1] = pid
end
if ARGV[4] == 'leave' then
  redis.call('HDEL', KEYS[4], worker)
  redis.call('ZREM', KEYS[5], worker)
end
return {'ok', handed}
