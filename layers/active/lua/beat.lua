-- A worker process's beat: every lease it holds renewed in one call, its presence entry refreshed,
-- the presence entries of processes that stopped beating deleted, and failed partitions whose
-- back-off is over sent back to pending (`layers/active/window.py`, `layers/active/presence.py`).
-- KEYS[1] active hash   KEYS[2] presence hash   KEYS[3] presence expiry zset   KEYS[4] retries zset
-- KEYS[5] failed zset   KEYS[6] pending zset
-- KEYS[7] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] worker_id as JSON text   ARGV[2] worker_id   ARGV[3] now (unix s)   ARGV[4] now (unix ms)
-- ARGV[5] now as RFC 3339 JSON text   ARGV[6] the presence entry ('' = none)
-- ARGV[7] when it expires (unix ms)   ARGV[8] how many partitions at most to send back to pending
-- ARGV[9..] the pids whose leases to renew
-- Returns {'ok', renewed pids, {pid, why, ...} of the leases found lost, partitions sent back,
-- the next retry's time (unix ms) or ''} | {'upgrade', pid} (a record in no layout of
-- `_layout.lua`: upgrade.lua, then again) | {'err', code, detail}. A lease is lost when its
-- partition is gone ('not_found'), claimed by another worker ('not_owner') or in another status
-- ('bad_state'); it is left as it is. Everything is read and checked before the first write.
-- include: _checks.lua, _heartbeat.lua, _retry.lua, _gostats.lua
local bad_type = wrong_type({KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, {'hash', 'zset', 'zset', 'zset', 'zset'})
if bad_type then
  return bad_type
end
local worker, name, now_s, now_ms, now_elk = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

local renew, renewed_pids, lost = {}, {}, {}
for i = 9, #ARGV do
  local pid = ARGV[i]
  local raw, err = typed_call('hash', 'HGET', KEYS[1], pid)
  if err then
    return err
  end
  if not raw then
    lost[#lost + 1], lost[#lost + 2] = pid, 'not_found'
  else
    local out, refused = renewed(raw, worker, '', now_s, now_elk)
    if out then
      renew[#renew + 1], renewed_pids[#renewed_pids + 1] = {pid, out}, pid
    elseif refused[1] == 'upgrade' then
      return {'upgrade', pid}
    elseif refused[1] == 'err' then
      lost[#lost + 1], lost[#lost + 2] = pid, refused[2]
    else
      return refused
    end
  end
end

local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms, 'LIMIT', '0', '20')
local due = {}
if tonumber(ARGV[8]) > 0 then
  due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms, 'LIMIT', '0', ARGV[8])
end
local back, dropped = retries_of(KEYS[1], due, {s = now_s, elk = now_elk})
local plan, err = {}, nil
if #back > 0 then
  plan, err = go_stats_read(KEYS[7], 'failed', 'pending')
  if not plan then
    return err
  end
end

for _, item in ipairs(renew) do
  redis.call('HSET', KEYS[1], item[1], item[2])
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[2], name, ARGV[6])
  redis.call('ZADD', KEYS[3], ARGV[7], name)
end
for _, gone in ipairs(expired) do
  if gone ~= name then
    redis.call('HDEL', KEYS[2], gone)
    redis.call('ZREM', KEYS[3], gone)
  end
end
write_retries(KEYS[1], KEYS[5], KEYS[6], back)
for _, item in ipairs(back) do
  redis.call('ZREM', KEYS[4], item[1])
  go_stats_write(plan)
end
for _, pid in ipairs(dropped) do
  redis.call('ZREM', KEYS[4], pid)
end
local next_retry = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
return {'ok', renewed_pids, lost, #back, next_retry[2] or ''}
