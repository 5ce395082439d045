-- Record a cold file, once it is durable in the cold store (layers/archive/cold.py): point its
-- batches at it in the cold map, list it, and retire the files it takes the place of. All or
-- nothing: if any batch's entry is not the one the writer read (another writer recorded it
-- meanwhile), or a file to retire is no longer listed, nothing is written and the batches that
-- changed are named, so the writer deletes its file (an orphan) and reads again.
-- include: _checks.lua
-- KEYS[1] cold map (string: a big-endian u32 per batch, its file number, 0 = none)
-- KEYS[2] cold files (hash: number -> JSON)   KEYS[3] retired files (zset: name -> unix s)
-- KEYS[4] archive meta (hash)
-- ARGV[1] the file's number   ARGV[2] its JSON   ARGV[3] its name   ARGV[4] its bytes
-- ARGV[5] partitions it adds to the cold tier (its rows less the rows of the batches it takes over)
-- ARGV[6] now (unix s)   ARGV[7] R, the files it retires; then R triples: number, name, bytes
-- ARGV[8 + 3R ..] pairs: batch, the file number the writer read for it (0: none)
-- Returns {'ok', files listed, partitions in the cold tier} or {'changed', batch...} or
-- {'err', 'wrong_type' | 'corrupt_meta', detail}, nothing written.
local bad = wrong_type(KEYS, {'string', 'hash', 'zset', 'hash'})
if bad then
  return bad
end
local number = ARGV[1]
if redis.call('HEXISTS', KEYS[2], number) == 1 then
  return {'changed'}
end
for _, field in ipairs({'cold_bytes', 'cold_partitions'}) do
  local value = redis.call('HGET', KEYS[4], field)
  if value and not string.match(value, '^%-?%d+$') then
    return {'err', 'corrupt_meta', field}
  end
end
local retired = tonumber(ARGV[7])
local changed = {'changed'}
for i = 0, retired - 1 do
  local at = 8 + 3 * i
  if redis.call('HEXISTS', KEYS[2], ARGV[at]) == 0 then
    changed[#changed + 1] = 'file ' .. ARGV[at]
  end
end
local first = 8 + 3 * retired
for start = first, #ARGV, 1000 do
  local get = {}
  for i = start, math.min(#ARGV, start + 999), 2 do
    get[#get + 1], get[#get + 2], get[#get + 3] = 'GET', 'u32', '#' .. ARGV[i]
  end
  local found = redis.call('BITFIELD', KEYS[1], unpack(get))
  for k, value in ipairs(found) do
    local i = start + 2 * (k - 1)
    if tostring(value) ~= ARGV[i + 1] then
      changed[#changed + 1] = ARGV[i]
    end
  end
end
if #changed > 1 then
  return changed
end
for start = first, #ARGV, 1000 do
  local set = {}
  for i = start, math.min(#ARGV, start + 999), 2 do
    set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = 'SET', 'u32', '#' .. ARGV[i], number
  end
  redis.call('BITFIELD', KEYS[1], unpack(set))
end
redis.call('HSET', KEYS[2], number, ARGV[2])
local bytes = tonumber(ARGV[4])
for i = 0, retired - 1 do
  local at = 8 + 3 * i
  redis.call('HDEL', KEYS[2], ARGV[at])
  redis.call('ZADD', KEYS[3], ARGV[6], ARGV[at + 1])
  bytes = bytes - tonumber(ARGV[at + 2])
end
redis.call('HINCRBY', KEYS[4], 'cold_bytes', bytes)
local partitions = redis.call('HINCRBY', KEYS[4], 'cold_partitions', ARGV[5])
redis.call('HSET', KEYS[4], 'cold_last', number, 'cold_written_at', ARGV[6])
redis.call('HDEL', KEYS[4], 'cold_error')
return {'ok', redis.call('HLEN', KEYS[2]), partitions}
