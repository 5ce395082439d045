-- The writes of a completion, included by complete.lua; not a script of its own.
-- include: _checks.lua

-- Redis does not roll a script back when a command fails, and complete.lua asks no key's type:
-- its writes come in an order whose every step can be undone. SETBIT first (the write a full
-- server refuses: then nothing is written), whose reply is the bit to restore; XADD, whose entry
-- can be deleted; ZREM of the lease; the active hash's write last, on the hash already read. A
-- write refused for its key's type (a foreign key in the namespace) undoes those before it.
-- Writes the completion of `pid`: queued as `entry`, or (`held_key`) kept in the active hash as
-- `entry` and held in `held_key` at `score`. Returns the queue entry's id (true when held), or
-- nil and the error reply.
local function write_completion(keys, pid, entry, held_key, score)
  local was_set, refused = typed_call('string', 'SETBIT', keys[3], pid, '1')
  if refused then
    return nil, refused
  end
  local id = true
  if not held_key then
    id, refused = typed_call('stream', 'XADD', keys[4], '*', 'p', entry)
    if refused then
      redis.call('SETBIT', keys[3], pid, was_set)
      return nil, refused
    end
  end
  refused = select(2, typed_call('zset', 'ZREM', keys[2], pid))
  if refused then
    redis.call('SETBIT', keys[3], pid, was_set)
    if not held_key then
      redis.call('XDEL', keys[4], id)
    end
    return nil, refused
  end
  if held_key then
    redis.call('HSET', keys[1], pid, entry)
    redis.call('ZADD', held_key, score, pid)
  else
    redis.call('HDEL', keys[1], pid)
  end
  return id
end

-- The archived form of a native record (`raw`) held since `claimed_at`, completed at `now`
-- (unix s): its range, from "partition_id" at index `at`, then worker, completion and duration.
local function native_entry(raw, at, worker, claimed_at, now)
  local range_end = string.find(raw, ',"error":', at, true)
  return '{' .. string.sub(raw, at, range_end - 1) .. ',"worker_id":' .. worker .. ',"completed_at":' .. now
    .. ',"duration":' .. string.format('%d', math.max(0, now - claimed_at)) .. '}'
end
