-- Write queue entries into the simple tier and acknowledge them, in one step.
-- Idempotent: a redelivered entry rewrites the same value and sets the same bit.
-- KEYS[1] completed hash   KEYS[2] index bitmap   KEYS[3] archive queue stream
-- ARGV[1] consumer group, then triplets: entry id, pid, archived JSON
-- Returns the number of entries written.
local n = 0
for i = 2, #ARGV, 3 do
  local id, pid, doc = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('HSET', KEYS[1], pid, doc)
  redis.call('SETBIT', KEYS[2], pid, 1)
  redis.call('XACK', KEYS[3], ARGV[1], id)
  redis.call('XDEL', KEYS[3], id)
  n = n + 1
end
return n
