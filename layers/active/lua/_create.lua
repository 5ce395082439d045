-- Partitions created pending, as create.lua and plan.lua create them. Included by the scripts that
-- name this file in their '-- include:' line (layers/plumbing/scripts.py); not a script of its own.

-- The first pid of `count` new partitions, numbered after the larger of our counter (hash `meta`,
-- last_pid) and Go's max_partition_id (hash `go_stats`, nil when the namespace is not bound), so
-- partitions created by an elk_coordinator leader and by partarchive never share an id; or nil and
-- the refusal: 'pid_range' (past `highest`), 'exists' (a record holds a new id already).
local function new_pids(active, meta, go_stats, count, highest)
  local last = tonumber(redis.call('HGET', meta, 'last_pid') or '0') or 0
  if go_stats then
    last = math.max(last, tonumber(redis.call('HGET', go_stats, 'max_partition_id') or '0') or 0)
  end
  last = math.floor(last)
  if last + count > tonumber(highest) then
    return nil, {'err', 'pid_range', string.format('%.0f', last + count)}
  end
  for i = 1, count do
    if redis.call('HEXISTS', active, string.format('%d', last + i)) == 1 then
      return nil, {'err', 'exists', string.format('%d', last + i)}
    end
  end
  return last + 1
end

-- Writes partitions `first_pid ..`, one for each pair of `bounds` ({min_id, max_id, ...} as decimal
-- text: ids are signed 64-bit, more than a Lua number holds exactly), pending in `active` and
-- `pending`, their records in format `fmt` ('native' | 'elk') with time `now` (JSON text, as the
-- format writes it) and `options` (JSON text, '' = none); and the highest pid in `meta`.
local function write_partitions(active, pending, meta, first_pid, bounds, fmt, now, options)
  local count = #bounds / 2
  for i = 0, count - 1 do
    local pid = string.format('%d', first_pid + i)
    local lo, hi = bounds[1 + 2 * i], bounds[2 + 2 * i]
    local record
    if fmt == 'elk' then
      record = '{"partition_id":' .. pid .. ',"min_id":' .. lo .. ',"max_id":' .. hi
        .. ',"worker_id":"","last_heartbeat":' .. now .. ',"status":"pending","updated_at":' .. now
        .. (options ~= '' and (',"options":' .. options) or '') .. ',"version":1,"created_at":' .. now .. '}'
    else
      record = '{"status":"pending","worker_id":"","version":0,"updated_at":' .. now
        .. ',"last_heartbeat":0,"claimed_at":0,"partition_id":' .. pid .. ',"min_id":' .. lo
        .. ',"max_id":' .. hi .. ',"error":"","created_at":' .. now .. ',"options":'
        .. (options ~= '' and options or '{}') .. '}'
    end
    redis.call('HSET', active, pid, record)
    redis.call('ZADD', pending, first_pid + i, pid)
  end
  redis.call('HSET', meta, 'last_pid', string.format('%d', first_pid + count - 1))
end

-- Go's counters (hash `key`) after `count` partitions were created up to pid `last_pid` and data id
-- `max_id` (decimal text), written as Go's creation writes them (HSetPartitionsWithStatsInTx in
-- data/redis.go): total and pending added to, max_partition_id and last_allocated_id raised only
-- (and only by a positive id), every number as Lua's tostring prints it (%.14g, Go's own bytes). A
-- counter that is no number is left alone (Go reads it as 0), a highest id that is none is
-- overwritten; a hash Go has not made yet is made as its InitPartitionStats makes it, eight "0".
local function go_stats_created(key, count, last_pid, max_id)
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'total', '0', 'pending', '0', 'claimed', '0', 'running', '0', 'completed', '0',
      'failed', '0', 'max_partition_id', '0', 'last_allocated_id', '0')
  end
  local now = redis.call('HMGET', key, 'total', 'pending', 'max_partition_id', 'last_allocated_id')
  local updates = {}
  for i, field in ipairs({'total', 'pending'}) do
    local value = tonumber(now[i] or '0')
    if value then
      updates[#updates + 1], updates[#updates + 2] = field, tostring(value + count)
    end
  end
  if last_pid > 0 and last_pid > (tonumber(now[3] or '0') or 0) then
    updates[#updates + 1], updates[#updates + 2] = 'max_partition_id', tostring(last_pid)
  end
  local top = tonumber(max_id)
  if top > 0 and top > (tonumber(now[4] or '0') or 0) then
    updates[#updates + 1], updates[#updates + 2] = 'last_allocated_id', tostring(top)
  end
  if #updates > 0 then
    redis.call('HSET', key, unpack(updates))
  end
end
