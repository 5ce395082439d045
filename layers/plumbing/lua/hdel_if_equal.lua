-- Delete hash fields only where they still hold the value the caller read (a source record
-- imported and verified), so a record rewritten in the meantime by a Go worker is kept.
-- KEYS[1] hash
-- ARGV    pairs: field, expected value
-- Returns the number of fields deleted.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
local CHUNK = 500 -- fields per HMGET/HDEL: well inside Lua's limit on unpacked arguments
local deleted = 0
for first = 1, #ARGV, 2 * CHUNK do
  local last = math.min(#ARGV, first + 2 * CHUNK - 1)
  local names = {}
  for i = first, last, 2 do
    names[#names + 1] = ARGV[i]
  end
  local values = redis.call('HMGET', KEYS[1], unpack(names))
  local equal = {}
  for j, name in ipairs(names) do
    if values[j] == ARGV[first + 2 * j - 1] then
      equal[#equal + 1] = name
    end
  end
  if #equal > 0 then
    deleted = deleted + redis.call('HDEL', KEYS[1], unpack(equal))
  end
end
return deleted
