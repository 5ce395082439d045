-- Give each worker ID a stable short number, assigning the next free one (from 1) to new IDs.
-- Two archivers registering the same new worker get the same number: the script is atomic.
-- KEYS[1] workers hash (worker_id -> short)   KEYS[2] reverse hash (short -> worker_id)
-- ARGV    worker IDs
-- Returns the short numbers, in ARGV order.
local out = {}
for i, worker in ipairs(ARGV) do
  local short = redis.call('HGET', KEYS[1], worker)
  if not short then
    short = redis.call('HLEN', KEYS[2]) + 1
    redis.call('HSET', KEYS[1], worker, short)
    redis.call('HSET', KEYS[2], short, worker)
  end
  out[i] = tonumber(short)
end
return out
