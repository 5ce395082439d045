-- Everything the query router reads for one partition, in one call (the router's pipeline of
-- ten reads, as one command: on a single server the round trip is the same, the client's work
-- per command is not). Read-only. Not used on Redis Cluster, whose keys here span slots.
-- KEYS[1] active hash     KEYS[2] index bitmap    KEYS[3] simple hash     KEYS[4] staging hash
-- KEYS[5] done bitmap     KEYS[6] expiry zset     KEYS[7] archive meta    KEYS[8] worker registry
-- KEYS[9] shelf string    KEYS[10] the batch's own key (versions before shelves)
-- ARGV[1] pid   ARGV[2] batch number   ARGV[3] slot in the shelf
-- Returns {active, indexed, simple, staged, done, newest, retention, generation, slot, legacy,
-- shelf problem, batch size}: the slot as the shelf holds it (codec/shelf.py) or false, '' or
-- why the shelf's table cannot be read, and the stored batch size (the caller computed ARGV[2]
-- from the one it knew: if they differ it asks again).
local pid, batch, slot = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = {
  redis.call('HGET', KEYS[1], pid),
  redis.call('GETBIT', KEYS[2], pid),
  redis.call('HGET', KEYS[3], pid),
  redis.call('HGET', KEYS[4], pid),
  redis.call('GETBIT', KEYS[5], pid),
  redis.call('ZSCORE', KEYS[6], batch),
  redis.call('HGET', KEYS[7], 'retention_s'),
  redis.call('HGET', KEYS[8], ''),
  false,
  redis.call('GET', KEYS[10]),
  '',
  redis.call('HGET', KEYS[7], 'batch_size'),
}
local size = redis.call('STRLEN', KEYS[9])
if size == 0 then
  return out
end
local head = redis.call('GETRANGE', KEYS[9], 0, 3)
local count = string.byte(head, 4) or 0
local data = 4 + 4 * count
if #head < 4 or string.sub(head, 1, 3) ~= '\167S\1' or count == 0 or size < data then
  out[11] = 'not a shelf of format 1, or shorter than its slot table'
  return out
end
local tbl = redis.call('GETRANGE', KEYS[9], 4, data - 1)
local start, stop, prev = 0, 0, 0
for i = 0, count - 1 do
  local a, b, c, d = string.byte(tbl, 1 + 4 * i, 4 + 4 * i)
  local e = a + b * 256 + c * 65536 + d * 16777216
  if e < prev then
    out[11] = 'shelf slot table does not match its data'
    return out
  end
  if i == slot - 1 then
    start = e
  elseif i == slot then
    stop = e
  end
  prev = e
end
if slot == 0 then
  start = 0
end
if data + prev ~= size then
  out[11] = 'shelf slot table does not match its data'
  return out
end
if slot < count and stop > start then
  out[9] = redis.call('GETRANGE', KEYS[9], data + start, data + stop - 1)
end
return out
