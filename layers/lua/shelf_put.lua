-- Write slots of a shelf (format in codec/shelf.py): each slot is replaced only if it still
-- holds the blob the caller read, and the shelf is rewritten once for all of them.
-- KEYS[1] shelf string
-- ARGV[1] slot count of a shelf created here
-- ARGV[2..] triples: slot (0-based, each at most once), the blob the caller read in it ('' if
--           the slot was empty), new blob ('' empties the slot)
-- Returns a 1 (written) or 0 (changed since read: read again) per triple, or
-- {'err', 'wrong_type' | 'corrupt' | 'bad_slot', detail} with nothing written.
-- A shelf left without any blob is deleted.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' then
  return {'err', 'wrong_type', KEYS[1] .. ' is a ' .. kind .. ', not a string'}
end
local MAGIC = '\167S\1'
local count = tonumber(ARGV[1])
local slots = {}
local shelf = redis.call('GET', KEYS[1])
if shelf then
  if #shelf < 4 or string.sub(shelf, 1, 3) ~= MAGIC then
    return {'err', 'corrupt', KEYS[1] .. ' is not a shelf of format 1'}
  end
  count = string.byte(shelf, 4)
  local data = 4 + 4 * count
  if count == 0 or #shelf < data then
    return {'err', 'corrupt', KEYS[1] .. ' is shorter than its slot table'}
  end
  local start = 0
  for i = 1, count do
    local a, b, c, d = string.byte(shelf, 1 + 4 * i, 4 + 4 * i)
    local stop = a + b * 256 + c * 65536 + d * 16777216
    if stop < start then
      return {'err', 'corrupt', KEYS[1] .. ' has its slot table out of order'}
    end
    slots[i] = string.sub(shelf, data + start + 1, data + stop)
    start = stop
  end
  if data + start ~= #shelf then
    return {'err', 'corrupt', KEYS[1] .. ' has a slot table that does not match its data'}
  end
else
  for i = 1, count do
    slots[i] = ''
  end
end
for i = 2, #ARGV, 3 do
  local slot = tonumber(ARGV[i])
  if not slot or slot < 0 or slot >= count or slot % 1 ~= 0 then
    return {'err', 'bad_slot', 'no slot ' .. ARGV[i] .. ' in ' .. KEYS[1]}
  end
end
local results = {}
local changed = false
for i = 2, #ARGV, 3 do
  local slot = tonumber(ARGV[i]) + 1
  if slots[slot] == ARGV[i + 1] then
    slots[slot] = ARGV[i + 2]
    changed = true
    results[#results + 1] = 1
  else
    results[#results + 1] = 0
  end
end
if changed then
  local ends = {}
  local stop = 0
  for i = 1, count do
    stop = stop + #slots[i]
    ends[i] = string.char(stop % 256, math.floor(stop / 256) % 256, math.floor(stop / 65536) % 256,
                          math.floor(stop / 16777216) % 256)
  end
  if stop == 0 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], MAGIC .. string.char(count) .. table.concat(ends) .. table.concat(slots))
  end
end
return results
