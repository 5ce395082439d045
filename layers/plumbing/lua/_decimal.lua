-- Exact arithmetic on integers kept as decimal text, included by the scripts that name this file
-- in their '-- include:' line (layers/plumbing/scripts.py); not a script of its own. Statistics sums may
-- pass 2^63, where HINCRBY fails (one partition of the whole int64 range processes 2^64 ids), and
-- ids pass 2^53, where Lua numbers stop being exact. Arguments match '^%-?%d+$' (checked by the caller).

local DECIMAL_CHUNK, DECIMAL_BASE = 7, 10000000

-- (1 or -1, the digits without leading zeros: '0' for zero, whose sign is 1)
local function decimal_parts(text)
  local sign, digits = 1, text
  if string.sub(text, 1, 1) == '-' then
    sign, digits = -1, string.sub(text, 2)
  end
  digits = string.match(digits, '^0*(%d-)$')
  if digits == '' then
    return 1, '0'
  end
  return sign, digits
end

local function magnitude_cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  if a == b then
    return 0
  end
  return a < b and -1 or 1
end

-- -1, 0 or 1 as a is less than, equal to or greater than b
local function decimal_cmp(a, b)
  local sa, ma = decimal_parts(a)
  local sb, mb = decimal_parts(b)
  if sa ~= sb then
    return sa < sb and -1 or 1
  end
  return sa * magnitude_cmp(ma, mb)
end

-- a + b (sign 1) or a - b (sign -1, a >= b) on magnitudes, a chunk of digits at a time
local function magnitude_add(a, b, sign)
  local out, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry ~= 0 do
    local x = i > 0 and tonumber(string.sub(a, math.max(1, i - DECIMAL_CHUNK + 1), i)) or 0
    local y = j > 0 and tonumber(string.sub(b, math.max(1, j - DECIMAL_CHUNK + 1), j)) or 0
    local sum = x + sign * y + carry
    carry = 0
    if sum >= DECIMAL_BASE then
      sum, carry = sum - DECIMAL_BASE, 1
    elseif sum < 0 then
      sum, carry = sum + DECIMAL_BASE, -1
    end
    out[#out + 1] = string.format('%07d', sum)
    i, j = i - DECIMAL_CHUNK, j - DECIMAL_CHUNK
  end
  local reversed = {}
  for k = #out, 1, -1 do
    reversed[#reversed + 1] = out[k]
  end
  local _, digits = decimal_parts(table.concat(reversed))
  return digits
end

-- a + b as decimal text
local function decimal_add(a, b)
  if #a <= 15 and #b <= 15 then -- below 10^15 each: the sum is exact as a Lua number
    return string.format('%d', tonumber(a) + tonumber(b))
  end
  local sa, ma = decimal_parts(a)
  local sb, mb = decimal_parts(b)
  local sign, digits = sa, nil
  if sa == sb then
    digits = magnitude_add(ma, mb, 1)
  elseif magnitude_cmp(ma, mb) >= 0 then
    digits = magnitude_add(ma, mb, -1)
  else
    sign, digits = sb, magnitude_add(mb, ma, -1)
  end
  if sign < 0 and digits ~= '0' then
    return '-' .. digits
  end
  return digits
end
