-- Create partitions numbered after the highest partition id ever created, all or nothing.
-- KEYS[1] active hash      KEYS[2] pending zset     KEYS[3] meta hash
-- KEYS[4] elk_coordinator's stats hash (only when the namespace is bound to a Go deployment)
-- ARGV[1] record format ('native' | 'elk')   ARGV[2] now as the format writes it (JSON text)
-- ARGV[3] options as JSON text ('' = none)   ARGV[4] highest partition id allowed
-- ARGV[5] min_id,max_id of each partition, all comma-separated in one argument (decimal text:
--         ids are signed 64-bit, more than a Lua number holds exactly)
-- Returns {'ok', first_pid, last_pid} or {'err', 'pid_range', last pid it would reach}.
-- Ids go on from the larger of our counter and Go's max_partition_id, so partitions created by
-- an elk_coordinator leader and by partarchive never share an id.
-- include: _checks.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'hash', 'hash'})
if bad_type then
  return bad_type
end
local bounds = {}
for id in string.gmatch(ARGV[5], '[^,]+') do
  bounds[#bounds + 1] = id
end
local count = #bounds / 2
local last = tonumber(redis.call('HGET', KEYS[3], 'last_pid') or '0') or 0
if KEYS[4] then
  last = math.max(last, tonumber(redis.call('HGET', KEYS[4], 'max_partition_id') or '0') or 0)
end
last = math.floor(last)
if last + count > tonumber(ARGV[4]) then
  return {'err', 'pid_range', string.format('%.0f', last + count)}
end
local first_pid = last + 1
for i = 0, count - 1 do
  if redis.call('HEXISTS', KEYS[1], string.format('%d', first_pid + i)) == 1 then
    return {'err', 'exists', string.format('%d', first_pid + i)}
  end
end
local now, options = ARGV[2], ARGV[3]
for i = 0, count - 1 do
  local pid = string.format('%d', first_pid + i)
  local lo, hi = bounds[1 + 2 * i], bounds[2 + 2 * i]
  local record
  if ARGV[1] == 'elk' then
    record = '{"partition_id":' .. pid .. ',"min_id":' .. lo .. ',"max_id":' .. hi
      .. ',"worker_id":"","last_heartbeat":' .. now .. ',"status":"pending","updated_at":' .. now
      .. (options ~= '' and (',"options":' .. options) or '') .. ',"version":1,"created_at":' .. now .. '}'
  else
    record = '{"status":"pending","worker_id":"","version":0,"updated_at":' .. now
      .. ',"last_heartbeat":0,"claimed_at":0,"partition_id":' .. pid .. ',"min_id":' .. lo
      .. ',"max_id":' .. hi .. ',"error":"","created_at":' .. now .. ',"options":'
      .. (options ~= '' and options or '{}') .. '}'
  end
  redis.call('HSET', KEYS[1], pid, record)
  redis.call('ZADD', KEYS[2], first_pid + i, pid)
end
local last_pid = first_pid + count - 1
redis.call('HSET', KEYS[3], 'last_pid', string.format('%d', last_pid))
if KEYS[4] then
  redis.call('HINCRBY', KEYS[4], 'total', count)
  redis.call('HINCRBY', KEYS[4], 'pending', count)
  redis.call('HSET', KEYS[4], 'max_partition_id', string.format('%d', last_pid))
  redis.call('HSET', KEYS[4], 'last_allocated_id', bounds[#bounds])
end
return {'ok', first_pid, last_pid}
