-- Merge one range's rollup into its coarse range and delete it: counts and sums are added,
-- min_id/first_at keep the smaller, max_id/last_at the larger.
-- KEYS[1] range hash   KEYS[2] coarse range hash
-- Returns the fields merged, or {'err', 'corrupt', field} (nothing written).
local fields = redis.call('HGETALL', KEYS[1])
for i = 2, #fields, 2 do
  if not string.find(fields[i], '^%-?%d+$') then
    return {'err', 'corrupt', fields[i - 1]}
  end
end
local keep_min = {min_id = true, first_at = true}
local keep_max = {max_id = true, last_at = true}
for i = 1, #fields, 2 do
  local name, value = fields[i], fields[i + 1]
  if keep_min[name] or keep_max[name] then
    local current = redis.call('HGET', KEYS[2], name)
    if not current or (keep_min[name] and tonumber(value) < tonumber(current))
        or (keep_max[name] and tonumber(value) > tonumber(current)) then
      redis.call('HSET', KEYS[2], name, value)
    end
  else
    redis.call('HINCRBY', KEYS[2], name, value)
  end
end
if #fields > 0 then
  redis.call('DEL', KEYS[1])
end
return #fields / 2
