-- Merge one range's rollup into its coarse range and delete it: counts and sums are added
-- (exactly, whatever the size: _decimal.lua), min_id/first_at keep the smaller, max_id/last_at
-- the larger. Both hashes are read and checked before the first write.
-- KEYS[1] range hash   KEYS[2] coarse range hash
-- Returns the fields merged, or {'err', 'corrupt_meta', field} (nothing written); the detail is
-- the coarse range's key and the field when the field is the coarse range's.
-- include: _decimal.lua
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then
  return 0
end
local names = {}
for i = 1, #fields, 2 do
  if not string.find(fields[i + 1], '^%-?%d+$') then
    return {'err', 'corrupt_meta', fields[i]}
  end
  names[#names + 1] = fields[i]
end
local current = {}
for first = 1, #names, 500 do -- well inside Lua's limit on unpacked arguments
  local values = redis.call('HMGET', KEYS[2], unpack(names, first, math.min(#names, first + 499)))
  for j = 1, math.min(#names, first + 499) - first + 1 do
    local value = values[j]
    if value and not string.find(value, '^%-?%d+$') then
      return {'err', 'corrupt_meta', KEYS[2] .. ' ' .. names[first + j - 1]}
    end
    current[first + j - 1] = value
  end
end
local keep_min = {min_id = true, first_at = true}
local keep_max = {max_id = true, last_at = true}
local out = {}
for j, name in ipairs(names) do
  local value, old = fields[2 * j], current[j]
  if not (keep_min[name] or keep_max[name]) then
    out[#out + 1], out[#out + 2] = name, decimal_add(old or '0', value)
  elseif not old or (keep_min[name] and decimal_cmp(value, old) < 0)
      or (keep_max[name] and decimal_cmp(value, old) > 0) then
    out[#out + 1], out[#out + 2] = name, value
  end
end
for first = 1, #out, 1000 do
  redis.call('HSET', KEYS[2], unpack(out, first, math.min(#out, first + 999)))
end
redis.call('DEL', KEYS[1])
return #names
