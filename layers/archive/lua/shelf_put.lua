-- Write slots of a shelf (format in codec/framing.py): each slot is replaced only if it still
-- holds the blob the caller read, and the shelf is rewritten once for all of them.
-- KEYS[1] shelf string
-- ARGV[1] slot count of a shelf created here
-- ARGV[2..] triples: slot (0-based, each at most once), the blob the caller read in it ('' if
--           the slot was empty), new blob ('' empties the slot)
-- Returns per triple 1 (written), 2 (not written: the slot already holds that non-empty blob, a
-- write sent again after its reply was lost, or the same blob written by another sealer) or 0
-- (changed since read: read again), or
-- {'err', 'wrong_type' | 'corrupt' | 'bad_slot', detail} with nothing written.
-- A shelf left without any blob is deleted.
-- include: _shelf.lua
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' then
  return {'err', 'wrong_type', KEYS[1] .. ' is a ' .. kind .. ', not a string'}
end
local count = tonumber(ARGV[1])
local slots = {}
local shelf = redis.call('GET', KEYS[1])
if shelf then
  local found, why = shelf_count(shelf)
  local ends
  if found then
    count = found
    ends, why = shelf_ends(string.sub(shelf, 5, 4 + 4 * count), count, #shelf)
  end
  if not ends then
    return {'err', 'corrupt', KEYS[1] .. ': ' .. why}
  end
  local data, start = 4 + 4 * count, 0
  for i = 1, count do
    slots[i] = string.sub(shelf, data + start + 1, data + ends[i])
    start = ends[i]
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
  elseif ARGV[i + 2] ~= '' and slots[slot] == ARGV[i + 2] then
    results[#results + 1] = 2
  else
    results[#results + 1] = 0
  end
end
if changed then
  local packed = shelf_pack(slots, count)
  if packed == '' then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], packed)
  end
end
return results
