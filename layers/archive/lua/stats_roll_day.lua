-- Roll one day's hourly completion counts into its daily total: h00..h23 are added to `d`
-- and removed. Per-worker fields (w:...) are daily already and stay. Late completions of the
-- day add new hourly fields, which the next roll adds to `d` again.
-- KEYS[1] day hash
-- Returns the completions rolled, or {'err', 'corrupt_meta', field} (nothing written).
local fields = redis.call('HGETALL', KEYS[1])
local sum, hours = 0, {}
for i = 1, #fields, 2 do
  local name = fields[i]
  if string.find(name, '^h%d%d$') then
    if not string.find(fields[i + 1], '^%-?%d+$') then
      return {'err', 'corrupt_meta', name}
    end
    sum = sum + tonumber(fields[i + 1])
    hours[#hours + 1] = name
  end
end
if #hours == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'd', sum)
redis.call('HDEL', KEYS[1], unpack(hours))
return sum
