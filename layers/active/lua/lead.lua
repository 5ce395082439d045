-- The leader's lease: taken, renewed or given up (`layers/active/planning.py`). One holder at a time
-- holds the lock, a hash (holder, its fencing token, since when) expiring ARGV[4] ms after it was last
-- taken or renewed. Each new lease takes the next token of the counter, so the writes of a holder
-- whose lease ended (it paused past it, say) carry a token the lock no longer holds and are refused
-- (`_fence.lua`), whoever leads since. In a namespace bound to an elk_coordinator deployment, KEYS[3]
-- is Go's leader lock (a string, the leader's worker id): while Go's own leader holds it no lease is
-- taken, and one held is given up; a lease's holder holds Go's lock too, in Go's format and with the
-- same time to live, so that Go's leaders stand aside (their SET NX fails).
-- KEYS[1] lock hash   KEYS[2] token counter (string)   KEYS[3] Go's leader lock (bound only)
-- ARGV[1] 'lead' | 'resign'   ARGV[2] holder   ARGV[3] the token of the lease it holds ('' = none)
-- ARGV[4] the lease (ms)   ARGV[5] now (unix ms)
-- Returns, to 'lead': {'leads', token, since (unix ms)} (taken, or renewed when ARGV[3] is its
-- token), {'other', holder, token, ms left} (another holder leads) or {'go', holder} (Go's leader
-- holds its lock); to 'resign': {'resigned', 1} or {'resigned', 0} (the lease was not, or no
-- longer, this one). Everything is read and checked before the first write.
-- include: _checks.lua
local bad_type = wrong_type(KEYS, {'hash', 'string', 'string'})
if bad_type then
  return bad_type
end
local holder, token, lease = ARGV[2], ARGV[3], ARGV[4]
local held = redis.call('HMGET', KEYS[1], 'holder', 'token', 'since')
local mine = token ~= '' and held[1] == holder and held[2] == token
local go = KEYS[3] and redis.call('GET', KEYS[3])

if ARGV[1] == 'resign' then
  if not mine then
    return {'resigned', 0}
  end
  redis.call('DEL', KEYS[1])
  if go == holder then
    redis.call('DEL', KEYS[3])
  end
  return {'resigned', 1}
end

if go and go ~= holder and go ~= held[1] then  -- Go's own leader, not a lease of ours
  if mine then
    redis.call('DEL', KEYS[1])
  end
  return {'go', go}
end
if held[1] and not mine then
  return {'other', held[1], held[2] or '', redis.call('PTTL', KEYS[1])}
end
local since = held[3]
if not mine then
  local last = redis.call('GET', KEYS[2])
  if last and not string.find(last, '^%d+$') then
    return {'err', 'corrupt_meta', KEYS[2]}
  end
  token = string.format('%d', tonumber(last or '0') + 1)
  since = ARGV[5]
  redis.call('SET', KEYS[2], token)
  redis.call('HSET', KEYS[1], 'holder', holder, 'token', token, 'since', since)
end
redis.call('PEXPIRE', KEYS[1], lease)
if KEYS[3] then
  redis.call('SET', KEYS[3], holder, 'PX', lease)
end
return {'leads', token, since or ''}
