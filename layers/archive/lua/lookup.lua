-- Everything the query router reads for one partition, in one call (the router's pipeline of
-- ten reads, as one command: on a single server the round trip is the same, the client's work
-- per command is not). Read-only. Not used on Redis Cluster, whose keys here span slots.
-- KEYS[1] active hash     KEYS[2] index bitmap    KEYS[3] simple hash     KEYS[4] staging hash
-- KEYS[5] done bitmap     KEYS[6] expiry zset     KEYS[7] archive meta    KEYS[8] worker registry
-- KEYS[9] shelf string    KEYS[10] the batch's own key (versions before shelves)
-- KEYS[11] cold map (a big-endian u32 per batch: its cold file, layers/archive/cold.py)
-- ARGV[1] pid   ARGV[2] batch number   ARGV[3] slot in the shelf
-- Returns {active, indexed, simple, staged, done, newest, retention, generation, slot, legacy,
-- shelf problem, batch size, cold file, cold store}: the slot as the shelf holds it
-- (codec/framing.py) or false, '' or why the shelf's table cannot be read, the stored batch size
-- (the caller computed ARGV[2] from the one it knew: if they differ it asks again), the batch's
-- cold map entry (4 bytes, or '' past the map's end) and where the cold store is (or false).
-- include: _shelf.lua
local pid, batch, slot = ARGV[1], ARGV[2], tonumber(ARGV[3])
local meta = redis.call('HMGET', KEYS[7], 'retention_s', 'batch_size', 'cold_store')
local out = {
  redis.call('HGET', KEYS[1], pid),
  redis.call('GETBIT', KEYS[2], pid),
  redis.call('HGET', KEYS[3], pid),
  redis.call('HGET', KEYS[4], pid),
  redis.call('GETBIT', KEYS[5], pid),
  redis.call('ZSCORE', KEYS[6], batch),
  meta[1],
  redis.call('HGET', KEYS[8], ''),
  false,
  redis.call('GET', KEYS[10]),
  '',
  meta[2],
  redis.call('GETRANGE', KEYS[11], 4 * tonumber(batch), 4 * tonumber(batch) + 3),
  meta[3],
}
local size = redis.call('STRLEN', KEYS[9])
if size == 0 then
  return out
end
local head = redis.call('GETRANGE', KEYS[9], 0, 3 + 4 * (slot + 1))
local count, why = shelf_count(head)
local start, stop
if count then
  start, stop = shelf_bounds(head, count, size, slot)
  if not start then
    why = stop
  end
end
if not start then
  out[11] = why
  return out
end
if stop > start then
  local data = 4 + 4 * count
  out[9] = redis.call('GETRANGE', KEYS[9], data + start, data + stop - 1)
end
return out
