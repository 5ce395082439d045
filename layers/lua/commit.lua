-- Commit archived partitions: set their index bits, count the new ones, move the tier up
-- when the total crosses a threshold, and acknowledge + delete their queue entries.
-- With store_simple = 1 the record JSON is written to the simple-tier hash as well.
-- Idempotent: a redelivered partition finds its bit set and is not counted again.
-- KEYS[1] completed hash   KEYS[2] index bitmap   KEYS[3] archive queue   KEYS[4] archive meta hash
-- ARGV[1] consumer group   ARGV[2] store_simple (0/1)   ARGV[3] compressed_from   ARGV[4] summary_above
-- ARGV[5..] triplets: entry id, pid, archived JSON
-- Returns {total archived, tier, number newly counted}.
local store_simple = ARGV[2] == '1'
local new = 0
local max_pid = tonumber(redis.call('HGET', KEYS[4], 'max_pid') or '0')
local seen_max = max_pid
for i = 5, #ARGV, 3 do
  local id, pid = ARGV[i], ARGV[i + 1]
  seen_max = math.max(seen_max, tonumber(pid))
  if store_simple then
    redis.call('HSET', KEYS[1], pid, ARGV[i + 2])
  end
  if redis.call('SETBIT', KEYS[2], pid, 1) == 0 then
    new = new + 1
  end
  redis.call('XACK', KEYS[3], ARGV[1], id)
  redis.call('XDEL', KEYS[3], id)
end
if seen_max > max_pid then
  redis.call('HSET', KEYS[4], 'max_pid', string.format('%d', seen_max))
end
local total = redis.call('HINCRBY', KEYS[4], 'total', new)
local rank = {simple = 1, compressed = 2, summary = 3}
local tier = redis.call('HGET', KEYS[4], 'tier') or 'simple'
local wanted = 'simple'
if total > tonumber(ARGV[4]) then
  wanted = 'summary'
elseif total >= tonumber(ARGV[3]) then
  wanted = 'compressed'
end
if rank[wanted] > rank[tier] then
  redis.call('HSET', KEYS[4], 'tier', wanted)
  tier = wanted
end
return {total, tier, new}
