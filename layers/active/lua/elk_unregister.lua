-- A worker's registration with elk_coordinator ended as Go's UnregisterWorker ends it (data/redis.go,
-- the same steps): its member of Go's workers zset rewritten with a stop_time (decoded and encoded
-- by cjson, as Go's script does, so the member's bytes are the ones Go writes), its score kept, and
-- its heartbeat key deleted (`layers/active/go_workers.py`).
-- KEYS[1] Go's workers zset   KEYS[2] the worker's heartbeat key
-- ARGV[1] worker id   ARGV[2] stop time (RFC 3339, seconds, the host's zone)
-- Returns 1 when the worker's member was found, else 0.
-- include: _checks.lua
local bad_type = wrong_type(KEYS, {'zset', 'string'})
if bad_type then
  return bad_type
end
local found = 0
local workers = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #workers, 2 do
  local member, score = workers[i], workers[i + 1]
  local ok, decoded = pcall(cjson.decode, member)
  if ok and type(decoded) == 'table' and decoded.worker_id == ARGV[1] then
    decoded.stop_time = ARGV[2]
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZADD', KEYS[1], score, cjson.encode(decoded))
    found = 1
    break
  end
end
redis.call('DEL', KEYS[2])
return found
