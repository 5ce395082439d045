-- The counted part of seals' bookkeeping, once their slots are written (layers/archive/sealing.py): the
-- expiry index entries of their batches and the byte counters behind the compression ratio.
-- It rides in a pipeline whose replies may go unread (a command before it failed, the connection
-- dropped); then it is sent again, and counts nothing twice: each group of seals carries a number
-- that grows within its archiver process, and a group whose number is not above the last one
-- counted for that process adds no bytes (its expiry entries are set again, to the same scores).
-- A batch goes into the expiry index when its sealer read the summary tier, or when the stored
-- tier is the summary tier (a sealer that read the tier before a commit moved it; the expiry
-- index walk may have passed its batch already).
-- include: _checks.lua
-- KEYS[1] archive meta (hash)   KEYS[2] expiry index (zset)   KEYS[3] last group counted per process (zset)
-- ARGV[1] process id   ARGV[2] age, in the groups' numbers' unit, past which a process's entry is dropped
-- ARGV[3] G, the groups; then per group: its number, JSON bytes, blob bytes added
-- ARGV[4 + 3G ..] triples: batch, newest completion (unix s), '1' if its sealer read the summary tier
-- Returns the groups counted now, or {'err', 'wrong_type' | 'corrupt_meta', detail} with nothing written.
local bad = wrong_type(KEYS, {'hash', 'zset', 'zset'})
if bad then
  return bad
end
local meta = redis.call('HMGET', KEYS[1], 'sealed_json_bytes', 'sealed_blob_bytes', 'tier')
for i, name in ipairs({'sealed_json_bytes', 'sealed_blob_bytes'}) do
  if meta[i] and not string.match(meta[i], '^%-?%d+$') then
    return {'err', 'corrupt_meta', name}
  end
end
local groups = tonumber(ARGV[3])
local last = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]) or '-1')
local json, blob, counted, newest = 0, 0, 0, last
for g = 0, groups - 1 do
  local at = 4 + 3 * g
  local number = tonumber(ARGV[at])
  if number > newest then
    json = json + tonumber(ARGV[at + 1])
    blob = blob + tonumber(ARGV[at + 2])
    counted = counted + 1
    newest = number
  end
end
local summary = meta[3] == 'summary'
for i = 4 + 3 * groups, #ARGV, 3 do
  if summary or ARGV[i + 2] == '1' then
    redis.call('ZADD', KEYS[2], ARGV[i + 1], ARGV[i])
  end
end
if counted > 0 then
  redis.call('HINCRBY', KEYS[1], 'sealed_json_bytes', json)
  redis.call('HINCRBY', KEYS[1], 'sealed_blob_bytes', blob)
  redis.call('ZADD', KEYS[3], newest, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (newest - tonumber(ARGV[2])))
end
return counted
