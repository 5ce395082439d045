-- Checks a script runs before its first write, included by the scripts that name this file in
-- their '-- include:' line (layers/scripts.py); not a script of its own.

-- nil if every key is of its kind or absent, else the error reply naming the first that is not.
-- Run before the first write, so a foreign key of the wrong type cannot leave half a change.
-- A kind of '' is not checked (a key the script checks as it reads it, `read_checked`).
local function wrong_type(kinds)
  for i, kind in ipairs(kinds) do
    if KEYS[i] and kind ~= '' then
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

-- The reply of a read of KEYS[i] (`...`: the command and its arguments), or nil and the error
-- reply naming the key when it is not a `kind`: for a script whose reads come before its first
-- write, a check of the key's type that costs nothing when the type is right. Other errors are
-- raised as they are.
local function read_checked(i, kind, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) ~= 'WRONGTYPE' then
      error(reply)
    end
    return nil, {'err', 'wrong_type', KEYS[i] .. ' is a ' .. redis.call('TYPE', KEYS[i]).ok .. ', not a ' .. kind}
  end
  return reply
end
