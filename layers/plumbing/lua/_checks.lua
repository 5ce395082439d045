-- Checks a script runs before its first write, included by the scripts that name this file in
-- their '-- include:' line (layers/plumbing/scripts.py); not a script of its own.

-- These take the script's keys as arguments, not from the global KEYS, so that they serve a
-- function of the worker's library (layers/plumbing/scripts.py) as well as a script.

-- The error reply naming `key`, which is not a `kind`.
local function wrong_type_reply(key, kind)
  return {'err', 'wrong_type', key .. ' is a ' .. redis.call('TYPE', key).ok .. ', not a ' .. kind}
end

-- nil if every key is of its kind or absent, else the error reply naming the first that is not.
-- Run before the first write, so a foreign key of the wrong type cannot leave half a change.
-- A kind of '' is not checked (a key the script checks as it reads it, `typed_call`).
local function wrong_type(keys, kinds)
  for i, kind in ipairs(kinds) do
    if keys[i] and kind ~= '' then
      local actual = redis.call('TYPE', keys[i]).ok
      if actual ~= 'none' and actual ~= kind then
        return wrong_type_reply(keys[i], kind)
      end
    end
  end
  return nil
end

-- The reply of `command` on `key` (and the rest of its arguments), or nil and the error reply
-- naming the key when it is not a `kind`: a check of the key's type that costs nothing when the
-- type is right. For a read before the script's first write, or a write the script can undo
-- (complete.lua). Other errors (a full server's OOM, say) are raised as they are.
local function typed_call(kind, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) ~= 'WRONGTYPE' then
      error(reply)
    end
    return nil, wrong_type_reply(key, kind)
  end
  return reply
end
