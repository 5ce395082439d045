-- Commit archived partitions, exactly once: set their index bits, count the new ones, move
-- the tier up when the total crosses a threshold, apply their statistics, and acknowledge +
-- delete their queue entries, all in one step. If any counted partition already has its
-- index bit (a redelivered entry), nothing is written and the duplicates are returned, so
-- the caller can rebuild the statistics without them and move them to the ack-only list.
-- KEYS[1] index bitmap   KEYS[2] archive queue   KEYS[3] archive meta hash
-- KEYS[4..] statistics hashes (the ops below address them by position in KEYS)
-- ARGV[1] consumer group   ARGV[2] compressed_from   ARGV[3] summary_above
-- ARGV[4] n, then n pairs: entry id ('-' = none: an import), pid   (counted entries)
-- then m, then m entry ids                                 (ack-only entries)
-- then quads until the end: key index, op, field, value    (op: '+' HINCRBY, '<' keep min, '>' keep max)
-- Returns {'dup', pid...} or {'ok', total archived, tier, n}.
local n = tonumber(ARGV[4])
local dups = {}
for i = 5, 4 + 2 * n, 2 do
  if redis.call('GETBIT', KEYS[1], ARGV[i + 1]) == 1 then
    dups[#dups + 1] = ARGV[i + 1]
  end
end
if #dups > 0 then
  table.insert(dups, 1, 'dup')
  return dups
end
local meta_max = tonumber(redis.call('HGET', KEYS[3], 'max_pid') or '0')
local max_pid = meta_max
for i = 5, 4 + 2 * n, 2 do
  local pid = ARGV[i + 1]
  redis.call('SETBIT', KEYS[1], pid, 1)
  max_pid = math.max(max_pid, tonumber(pid))
  if ARGV[i] ~= '-' then
    redis.call('XACK', KEYS[2], ARGV[1], ARGV[i])
    redis.call('XDEL', KEYS[2], ARGV[i])
  end
end
local pos = 5 + 2 * n
local m = tonumber(ARGV[pos])
for i = pos + 1, pos + m do
  if ARGV[i] ~= '-' then
    redis.call('XACK', KEYS[2], ARGV[1], ARGV[i])
    redis.call('XDEL', KEYS[2], ARGV[i])
  end
end
for i = pos + m + 1, #ARGV, 4 do
  local key, op, field, value = KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if op == '+' then
    redis.call('HINCRBY', key, field, value)
  else
    local current = redis.call('HGET', key, field)
    if not current or (op == '<' and tonumber(value) < tonumber(current))
        or (op == '>' and tonumber(value) > tonumber(current)) then
      redis.call('HSET', key, field, value)
    end
  end
end
if max_pid > meta_max then
  redis.call('HSET', KEYS[3], 'max_pid', string.format('%d', max_pid))
end
local total = redis.call('HINCRBY', KEYS[3], 'total', n)
local rank = {simple = 1, compressed = 2, summary = 3}
local tier = redis.call('HGET', KEYS[3], 'tier') or 'simple'
local wanted = 'simple'
if total > tonumber(ARGV[3]) then
  wanted = 'summary'
elseif total >= tonumber(ARGV[2]) then
  wanted = 'compressed'
end
if rank[wanted] > rank[tier] then
  redis.call('HSET', KEYS[3], 'tier', wanted)
  tier = wanted
end
return {'ok', total, tier, n}
