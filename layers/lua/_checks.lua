-- Checks a script runs before its first write, included by the scripts that name this file in
-- their '-- include:' line (layers/scripts.py); not a script of its own.

-- nil if every key is of its kind or absent, else the error reply naming the first that is not.
-- Run before the first write, so a foreign key of the wrong type cannot leave half a change.
local function wrong_type(kinds)
  for i, kind in ipairs(kinds) do
    if KEYS[i] then
      local actual = redis.call('TYPE', KEYS[i]).ok
      if actual ~= 'none' and actual ~= kind then
        return {'err', 'wrong_type', KEYS[i] .. ' is a ' .. actual .. ', not a ' .. kind}
      end
    end
  end
  return nil
end

-- nil if every field of our status counters hash is an integer, else the error reply naming the
-- first that is not: HINCRBY on such a field would fail after the script's first write.
local function corrupt_counts(key)
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    if not string.match(flat[i + 1], '^%-?%d+$') then
      return {'err', 'corrupt_meta', key .. ' ' .. flat[i]}
    end
  end
  return nil
end
