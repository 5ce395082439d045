-- The shelf layout of codec/framing.py on the server: shelf_put.lua writes shelves, lookup.lua cuts
-- one slot out of one. Included by the scripts that name this file in their '-- include:' line
-- (layers/plumbing/scripts.py); not a script of its own. A test holds the three to the same bytes.
--   magic '\167S', version 1, slot count N (a byte each), N little-endian u32 slot ends, the data

local SHELF_HEAD = '\167S\1' -- magic and version

-- the struct library where the engine has it (Redis, Valkey), else false (fakeredis, whose
-- functions refuse even to name a global they lack); found on first use, as loading a library
-- may not call pcall
local SHELF_STRUCT
local function shelf_struct()
  if SHELF_STRUCT == nil then
    local found, lib = pcall(function() return struct end)
    SHELF_STRUCT = found and type(lib) == 'table' and lib or false
  end
  return SHELF_STRUCT
end

-- the slot count of a shelf that starts with `head` (its first 4 bytes or more), or nil and why
-- not (the words of codec/framing.py)
local function shelf_count(head)
  local m1, m2, version, count = string.byte(head, 1, 4)
  if not count then
    return nil, 'shelf is shorter than its header'
  end
  if m1 ~= 167 or m2 ~= 83 then
    return nil, 'not a partarchive shelf (wrong magic)'
  end
  if version ~= 1 then
    return nil, 'unknown shelf format version ' .. version
  end
  if count == 0 then
    return nil, 'shelf is shorter than its slot table'
  end
  return count
end

-- the slot ends in a shelf's table (the 4 * count bytes of `tbl` from byte `at`, 1 if not
-- given), or nil and why they do not describe a shelf of `size` bytes. One call reads them all:
-- struct.unpack where the engine has it, string.byte elsewhere.
local function shelf_ends(tbl, count, size, at)
  at = at or 1
  if #tbl < at - 1 + 4 * count or size < 4 + 4 * count then
    return nil, 'shelf is shorter than its slot table'
  end
  local ends
  local lib = shelf_struct()
  if lib then
    ends = {lib.unpack('<' .. string.rep('I4', count), tbl, at)}
    ends[count + 1] = nil -- where unpacking stopped
  else
    local b = {string.byte(tbl, at, at - 1 + 4 * count)}
    ends = {}
    for i = 1, count do
      local j = 4 * i
      ends[i] = b[j - 3] + b[j - 2] * 256 + b[j - 1] * 65536 + b[j] * 16777216
    end
  end
  local prev = 0
  for i = 1, count do
    local e = ends[i]
    if e < prev then
      return nil, 'shelf slot table does not match its data'
    end
    prev = e
  end
  if 4 + 4 * count + prev ~= size then
    return nil, 'shelf slot table does not match its data'
  end
  return ends
end

-- where slot `slot` (0-based) lies in the data of a shelf of `size` bytes whose head (header and
-- slot table) starts `head`, which holds at least the table's ends up to this slot's: start and
-- stop (start == stop: an empty slot), or nil and why not. Reads the two ends the slot needs, as
-- codec/framing.py's shelf_slot does: damage elsewhere in the table is found by the reader of the
-- slot it describes (and refused by shelf_put.lua, which checks every end).
local function shelf_bounds(head, count, size, slot)
  local data = 4 + 4 * count
  if size < data then
    return nil, 'shelf is shorter than its slot table'
  end
  if slot >= count then
    return 0, 0
  end
  local start, stop
  local lib = shelf_struct()
  if lib then
    if slot == 0 then
      start, stop = 0, lib.unpack('<I4', head, 5)
    else
      start, stop = lib.unpack('<I4I4', head, 1 + 4 * slot)
    end
  else
    local b = {string.byte(head, 1 + 4 * slot, 8 + 4 * slot)} -- the ends before and of the slot
    stop = b[5] + b[6] * 256 + b[7] * 65536 + b[8] * 16777216
    start = slot == 0 and 0 or b[1] + b[2] * 256 + b[3] * 65536 + b[4] * 16777216
  end
  if start > stop or stop > size - data then
    return nil, 'shelf slot table does not match its data'
  end
  return start, stop
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
