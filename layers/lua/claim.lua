-- Claim a partition: first one whose lease went stale (so a dead worker's partition is taken
-- over within the lease timeout whatever is pending), else the lowest pending one.
-- KEYS[1] active hash   KEYS[2] pending zset   KEYS[3] leases zset   KEYS[4] counts hash
-- KEYS[5] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] worker_id     ARGV[2] worker_id as JSON text   ARGV[3] now (unix ms)
-- ARGV[4] stale after (ms)   ARGV[5] now (unix s)   ARGV[6] now as RFC 3339 JSON text
-- Returns {'none', corrupt pids...} or {'ok', record JSON, previous holder or ''}.
-- Index entries that no longer match their record (a Go worker moved it, or it is gone) are
-- corrected as they are met; a corrupt record is skipped and reported, never written.
-- include: _checks.lua, _record.lua
local bad_type = wrong_type({'hash', 'zset', 'zset', 'hash', 'hash'})
bad_type = bad_type or corrupt_counts(KEYS[4])
if bad_type then
  return bad_type
end
local now_ms, stale_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = {s = ARGV[5], elk = ARGV[6]}
local corrupt = {}
local chosen, chosen_pid, previous

local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms - stale_ms, 'LIMIT', 0, 20)
for _, pid in ipairs(stale) do
  local rec, why = load_record(KEYS[1], pid)
  if not rec then
    if why == 'corrupt' then
      corrupt[#corrupt + 1] = pid
    else
      redis.call('ZREM', KEYS[3], pid)
    end
  elseif not is_leased(rec.status) then
    redis.call('ZREM', KEYS[3], pid)
  else
    local beat = heartbeat_ms(rec)
    if beat > now_ms - stale_ms then
      redis.call('ZADD', KEYS[3], beat, pid)
    else
      chosen, chosen_pid, previous = rec, pid, rec.worker
      break
    end
  end
end

if not chosen then
  local pending = redis.call('ZRANGE', KEYS[2], 0, 19)
  for _, pid in ipairs(pending) do
    local rec, why = load_record(KEYS[1], pid)
    if not rec then
      if why == 'corrupt' then
        corrupt[#corrupt + 1] = pid
      else
        redis.call('ZREM', KEYS[2], pid)
      end
    elseif rec.status ~= 'pending' then
      redis.call('ZREM', KEYS[2], pid)
      if is_leased(rec.status) then
        redis.call('ZADD', KEYS[3], heartbeat_ms(rec), pid)
      end
    else
      chosen, chosen_pid, previous = rec, pid, ''
      break
    end
  end
end

if not chosen then
  table.insert(corrupt, 1, 'none')
  return corrupt
end
local pid = chosen_pid
local now = now_text(chosen, clock)
redis.call('HINCRBY', KEYS[4], chosen.status, -1)
redis.call('HINCRBY', KEYS[4], 'claimed', 1)
go_stats_move(KEYS[5], chosen.status, 'claimed')
set(chosen, 'status', '"claimed"')
set(chosen, 'worker_id', ARGV[2])
bump_version(chosen)
set(chosen, 'updated_at', now)
set(chosen, 'last_heartbeat', now)
if chosen.fmt == 'native' then
  set(chosen, 'claimed_at', now)
end
local out = encode_record(chosen)
redis.call('HSET', KEYS[1], pid, out)
redis.call('ZREM', KEYS[2], pid)
redis.call('ZADD', KEYS[3], now_ms, pid)
return {'ok', out, previous}
