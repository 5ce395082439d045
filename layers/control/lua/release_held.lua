-- Release held completions: send the partitions completed while archival was paused, or while
-- outside the gray release's share, that the switch now lets through (not paused, and in the
-- share: `_share.lua`) to the archive queue, each exactly as complete.lua would have queued it
-- when it completed (a native record's archived form with its completion time; a Go record's
-- bytes as kept), and take it out of the active hash, in one step per partition. Refused while
-- paused (KEYS[4] says so). Pids held outside the share stay held.
-- A held pid whose record is gone or no longer completed (changed by hand) is only dropped from
-- KEYS[2]; one whose record cannot be read is dropped from KEYS[2] and left in the active hash,
-- and named in the reply.
-- KEYS[1] active hash   KEYS[2] held pids (zset, score = `held_score`)   KEYS[3] archive queue
-- KEYS[4] the archival switch (string)   KEYS[5] how many were ever released (string counter)
-- ARGV[1] how many pids at most (the lowest buckets first, then the lowest completion times)
-- Returns {'paused'} | {'err', 'wrong_type' or 'corrupt_meta', what}
-- | {queued, dropped, left in the share, held in all, unreadable pid...}.
-- Everything is read and checked before the first write.
-- include: _checks.lua, _record.lua, _share.lua
local bad_type = wrong_type(KEYS, {'hash', 'zset', 'stream', 'string', 'string'})
if bad_type then
  return bad_type
end
local released = redis.call('GET', KEYS[5])
if released and not string.match(released, '^%d+$') then
  return {'err', 'corrupt_meta', KEYS[5]}
end
local paused, share = switch_state(redis.call('GET', KEYS[4]))
if paused then
  return {'paused'}
end
local below = '(' .. string.format('%.0f', share * 1e13)
local pids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', below, 'LIMIT', 0, tonumber(ARGV[1]))
local entries, unreadable = {}, {}
for i, pid in ipairs(pids) do
  local rec, why = load_record(KEYS[1], pid)
  if rec and rec.status == 'completed' then
    if rec.fmt == 'elk' then
      entries[i] = redis.call('HGET', KEYS[1], pid)
    elseif is_int(rec.raw.updated_at) and is_int(rec.raw.claimed_at) then
      entries[i] = native_archived(rec, tonumber(rec.raw.updated_at))
    else
      unreadable[#unreadable + 1] = pid
    end
  elseif why == 'corrupt' then
    unreadable[#unreadable + 1] = pid
  end
end
local queued, dropped = 0, 0
for i, pid in ipairs(pids) do
  if entries[i] then
    redis.call('XADD', KEYS[3], '*', 'p', entries[i])
    redis.call('HDEL', KEYS[1], pid)
    queued = queued + 1
  else
    dropped = dropped + 1
  end
  redis.call('ZREM', KEYS[2], pid)
end
if queued > 0 then
  redis.call('INCRBY', KEYS[5], queued)
end
local out = {queued, dropped, redis.call('ZCOUNT', KEYS[2], '-inf', below), redis.call('ZCARD', KEYS[2])}
for _, pid in ipairs(unreadable) do
  out[#out + 1] = pid
end
return out
