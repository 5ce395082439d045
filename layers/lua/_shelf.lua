-- The shelf layout of codec/shelf.py on the server: shelf_put.lua writes shelves, lookup.lua cuts
-- one slot out of one. Included by the scripts that name this file in their '-- include:' line
-- (layers/scripts.py); not a script of its own. A test holds the three to the same bytes.
--   magic '\167S', version 1, slot count N (a byte each), N little-endian u32 slot ends, the data

local SHELF_MAGIC, SHELF_HEAD = '\167S', '\167S\1'

-- the slot count of a shelf that starts with `head` (its first 4 bytes or more), or nil and why
-- not (the words of codec/shelf.py)
local function shelf_count(head)
  if #head < 4 then
    return nil, 'shelf is shorter than its header'
  end
  if string.sub(head, 1, 2) ~= SHELF_MAGIC then
    return nil, 'not a partarchive shelf (wrong magic)'
  end
  if string.byte(head, 3) ~= 1 then
    return nil, 'unknown shelf format version ' .. string.byte(head, 3)
  end
  local count = string.byte(head, 4)
  if count == 0 then
    return nil, 'shelf is shorter than its slot table'
  end
  return count
end

-- the slot ends in a shelf's table (`tbl`: the 4 * count bytes after its head), or nil and why
-- they do not describe a shelf of `size` bytes
local function shelf_ends(tbl, count, size)
  if #tbl < 4 * count or size < 4 + 4 * count then
    return nil, 'shelf is shorter than its slot table'
  end
  local ends, prev = {}, 0
  for i = 1, count do
    local a, b, c, d = string.byte(tbl, 4 * i - 3, 4 * i)
    local e = a + b * 256 + c * 65536 + d * 16777216
    if e < prev then
      return nil, 'shelf slot table does not match its data'
    end
    ends[i], prev = e, e
  end
  if 4 + 4 * count + prev ~= size then
    return nil, 'shelf slot table does not match its data'
  end
  return ends
end

-- a shelf of `count` slots holding `slots` ('' for an empty one), or '' when every slot is empty
local function shelf_pack(slots, count)
  local ends, stop = {}, 0
  for i = 1, count do
    stop = stop + #slots[i]
    ends[i] = string.char(stop % 256, math.floor(stop / 256) % 256, math.floor(stop / 65536) % 256,
                          math.floor(stop / 16777216) % 256)
  end
  if stop == 0 then
    return ''
  end
  return SHELF_HEAD .. string.char(count) .. table.concat(ends) .. table.concat(slots)
end
